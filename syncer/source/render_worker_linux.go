package source

import (
	"os"
	"os/exec"
	"syscall"
)

// setWorkerProcess puts the worker in its own process group (so that
// killing it kills what it started: git, for remote bases), has the kernel
// kill it when deputy dies, and makes the context's end kill the group.
func setWorkerProcess(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		killWorker(cmd)
		return nil
	}
}

// killWorker kills the worker's process group.
func killWorker(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		_ = cmd.Process.Kill()
	}
}

// killGroup kills what is left of the worker's process group once the
// worker was waited for (the group lives on, and its ID is not reused, while
// a process the worker started runs).
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// limitAddressSpace sets RLIMIT_AS to the address space the process has now
// plus twice limit and workerAddressSlack: the Go runtime reserves about
// 1.2 GB of address space at start, and maps the heap as it grows, so the
// limit is set relative to what it has. An allocation beyond it fails at
// once (the runtime's "out of memory"), however fast it grows between two
// looks of the watchdog.
func limitAddressSpace(limit int64) {
	vm := procStatusBytes("VmSize:")
	if vm == 0 {
		return
	}
	max := vm + 2*uint64(limit) + workerAddressSlack
	_ = syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: max, Max: max})
}

// preferOOMKill makes this process the kernel OOM killer's first choice
// (raising one's own oom_score_adj needs no privilege): when deputy's
// container fills up, a render worker dies, not deputy.
func preferOOMKill() {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
}
