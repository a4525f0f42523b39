// Package peakrss reads a load tool's own peak resident set size, which
// the tools report next to their timings.
package peakrss

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// KiB is the process's peak resident set size in KiB (VmHWM of
// /proc/self/status, Linux), or -1 where it cannot be read.
func KiB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
