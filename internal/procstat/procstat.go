// Package procstat reads resident memory and CPU time from /proc, for the
// figures the demo and benchmarks print.
package procstat

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// RSS returns the resident set size of pid in bytes (Linux /proc only).
func RSS(pid int) (int64, error) { return status(pid, "VmRSS") }

// PeakRSS returns the largest resident set size pid has had so far, in
// bytes: the memory it must be given not to be killed (Linux /proc only).
func PeakRSS(pid int) (int64, error) { return status(pid, "VmHWM") }

// status reads a kB field of /proc/PID/status, in bytes.
func status(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, field+":") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			break
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("procstat: %s %q: %w", field, line, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("procstat: no %s for pid %d", field, pid)
}

// MiB formats bytes as mebibytes.
func MiB(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// clockTick is USER_HZ, the unit of the CPU times in /proc/PID/stat; it is
// 100 on every Linux architecture Go supports.
const clockTick = 100

// Sub returns after minus before per key, leaving out keys that used
// less than least in between.
func Sub(after, before map[string]time.Duration, least time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for k, v := range after {
		if d := v - before[k]; d >= least {
			out[k] = d
		}
	}
	return out
}

// CPUOfTrees returns the CPU time (user + system) each named process and
// its direct children have used so far: the process's own, what its
// children that exited and were reaped used (cutime and cstime), and its
// live children's own. Keyed as pids is. It counts only these processes,
// so that another stack of the same commands on the machine (another
// test's API server or PostgreSQL) is not charged to this one;
// PostgreSQL's backends are the postmaster's children. A live child that
// is itself named in pids is charged under its own name only: a process
// that started the others (a benchmark running its own control plane)
// would otherwise count their CPU twice.
func CPUOfTrees(pids map[string]int) (map[string]time.Duration, error) {
	stats, err := readStats()
	if err != nil {
		return nil, err
	}
	named := make(map[int]bool, len(pids))
	for _, pid := range pids {
		named[pid] = true
	}
	out := make(map[string]time.Duration, len(pids))
	for name, pid := range pids {
		n := stats[pid].self + stats[pid].children
		for child, st := range stats {
			if st.ppid == pid && !named[child] {
				n += st.self
			}
		}
		out[name] = ticks(n)
	}
	return out, nil
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTick }

// stat is what this package reads of one /proc/PID/stat line; the times
// in ticks.
type stat struct {
	comm           string
	ppid           int
	self, children int64
}

// readStats reads the stat line of every live process, by PID.
func readStats() (map[int]stat, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("procstat: %w", err)
	}
	stats := map[int]stat{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue // exited since the listing
		}
		st, err := parseStat(string(b))
		if err != nil {
			return nil, err
		}
		stats[pid] = st
	}
	return stats, nil
}

// parseStat reads one /proc/PID/stat line. comm is in parentheses and may
// itself hold spaces and parentheses, so the fields after it are found
// from the last ')'.
func parseStat(s string) (stat, error) {
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return stat{}, fmt.Errorf("procstat: malformed stat line %q", s)
	}
	// After ") ": state is field 3 of the line, ppid 4, utime and stime
	// 14 and 15, cutime and cstime 16 and 17.
	f := strings.Fields(s[closing+1:])
	if len(f) < 15 {
		return stat{}, fmt.Errorf("procstat: short stat line %q", s)
	}
	var n [5]int64
	for i, v := range []string{f[1], f[11], f[12], f[13], f[14]} {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return stat{}, fmt.Errorf("procstat: stat line %q: %w", s, err)
		}
		n[i] = x
	}
	return stat{comm: s[open+1 : closing], ppid: int(n[0]), self: n[1] + n[2], children: n[3] + n[4]}, nil
}
