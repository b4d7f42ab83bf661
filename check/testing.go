package check

import (
	"strings"
	"testing"
)

// Test runs Run from a Go test, with t's context, progress in t's log and
// the logs in a directory of t's, and fails t with the report in Markdown
// (each broken run's reproduction, what it left, its timeline and the end
// of the operator's log) when an experiment broke or the check could not
// run. It returns the report for further assertions.
func Test(t testing.TB, spec *Spec, opts Options) Report {
	t.Helper()
	if opts.Progress == nil {
		opts.Progress = testLog{t}
	}
	if opts.WorkDir == "" {
		opts.WorkDir = t.TempDir() // the report carries the end of each broken run's log
	}
	rep, err := Run(t.Context(), spec, opts)
	if err != nil {
		t.Fatalf("finale check could not run: %v", err)
	}
	if !rep.OK() {
		var b strings.Builder
		_ = rep.WriteMarkdown(&b) // a strings.Builder does not fail
		t.Errorf("finale check: %s broke:\n%s", strings.Join(rep.Broken(), ", "), b.String())
	}
	return rep
}

// testLog writes progress lines to a test's log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
