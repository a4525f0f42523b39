package framework

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PeakRSS returns the peak resident set size (VmHWM of /proc/PID/status), in
// bytes, of a running process: the most memory it has held at once.
func PeakRSS(pid int) (int64, error) {
	return procStatusBytes(pid, "VmHWM")
}

// RSS returns the current resident set size (VmRSS), in bytes.
func RSS(pid int) (int64, error) {
	return procStatusBytes(pid, "VmRSS")
}

func procStatusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		fields := strings.Fields(value) // "123456 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("/proc/%d/status: unexpected %s line %q", pid, field, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, field, err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s line", pid, field)
}
