//go:build !linux

package source

import "os/exec"

// setWorkerProcess makes the context's end kill the worker.
func setWorkerProcess(cmd *exec.Cmd) {}

// killWorker kills the worker.
func killWorker(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

// killGroup is Linux only.
func killGroup(*exec.Cmd) {}

// limitAddressSpace is Linux only: elsewhere the watchdog alone bounds the
// worker.
func limitAddressSpace(int64) {}

// preferOOMKill is Linux only.
func preferOOMKill() {}
