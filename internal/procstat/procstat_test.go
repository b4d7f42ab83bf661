package procstat

import (
	"bufio"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRSSOfSelf(t *testing.T) {
	rss, err := RSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A Go test binary with the race detector is at least a few MiB.
	if rss < 1<<20 {
		t.Fatalf("RSS of self = %d bytes, implausibly small", rss)
	}
	if _, err := RSS(-1); err == nil {
		t.Fatal("RSS(-1) succeeded")
	}
	peak, err := PeakRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if peak < rss {
		t.Fatalf("peak RSS %d < RSS %d read before it", peak, rss)
	}
}

func TestParseStat(t *testing.T) {
	tail := " S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 200 300"
	tests := []struct {
		name, line, comm string
		ticks            int64
		wantErr          bool
	}{
		{name: "plain", line: "42 (postgres)" + tail, comm: "postgres", ticks: 300},
		{name: "comm with spaces and parentheses", line: "7 (a) (b c)" + tail, comm: "a) (b c", ticks: 300},
		{name: "no parentheses", line: "7 postgres" + tail, wantErr: true},
		{name: "short", line: "7 (x) S 1 2", wantErr: true},
		{name: "not a number", line: "7 (x) S 1 2 3 4 5 6 7 8 9 10 u 50 0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := parseStat(tt.line)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseStat error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff([]any{tt.comm, tt.ticks}, []any{st.comm, st.self}); diff != "" {
				t.Fatalf("parseStat (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCPUOfTreesCountsAChild: a child's CPU is charged to its parent's
// tree while it runs and after it has exited and been reaped.
func TestCPUOfTreesCountsAChild(t *testing.T) {
	pids := map[string]int{"self": os.Getpid()}
	before, err := CPUOfTrees(pids)
	if err != nil {
		t.Fatal(err)
	}
	// A shell loop with a fixed amount of work (about a quarter of a
	// second of CPU here), then exits; Wait reaps it, which moves its time
	// into our cutime. A loop bounded by wall time got less CPU than the
	// bound on a loaded machine (60 ms in a second).
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	after, err := CPUOfTrees(pids)
	if err != nil {
		t.Fatal(err)
	}
	if d := after["self"] - before["self"]; d < 100*time.Millisecond {
		t.Fatalf("a reaped child's CPU is not charged to its parent: %s", d)
	}
}

// TestCPUOfTreesCountsANamedChildOnce: a live child that is named too is
// charged under its own name, not also to its parent's tree, so that the
// named processes' CPU adds up to what they used.
func TestCPUOfTreesCountsANamedChildOnce(t *testing.T) {
	// Fixed work, then a line to say it is done, then a wait for stdin to
	// close: alive, and idle, while it is measured.
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done; read x`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close() // ends the child's read
		_ = cmd.Wait()    // its exit status says nothing here
	})
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	both, err := CPUOfTrees(map[string]int{"self": os.Getpid(), "child": cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	alone, err := CPUOfTrees(map[string]int{"self": os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	child := both["child"]
	if child < 100*time.Millisecond {
		t.Fatalf("the child's CPU is %s after its fixed work; expected at least 100ms", child)
	}
	// alone["self"] counts the child once (in the tree); both["self"] +
	// child must not count it twice. What self used between the two reads
	// is far less than half the child's work.
	if twice := both["self"] + child - alone["self"]; twice > child/2 {
		t.Fatalf("self %s + child %s named apart exceed self's tree %s by %s: the child is counted twice",
			both["self"], child, alone["self"], twice)
	}
}
