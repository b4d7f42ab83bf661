// Package procstat reads a process's resident memory from /proc, for the
// start-up figures the demo and benchmarks print.
package procstat

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// RSS returns the resident set size of pid in bytes (Linux /proc only).
func RSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "VmRSS:") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			break
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("procstat: VmRSS %q: %w", line, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("procstat: no VmRSS for pid %d", pid)
}

// MiB formats bytes as mebibytes.
func MiB(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
