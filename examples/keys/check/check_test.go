// Package keyscheck_test runs finale check against the key operator of
// examples/keys, as its author would in CI: the operator and the key
// service built and run as processes, the description file
// (operator.yaml) next to this test.
package keyscheck_test

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/check"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard()) // the report says what happened; the operator logs to its own file
	os.Exit(m.Run())
}

// The key operator passes every experiment of finale check --quick (the
// stall needs HTTP/2, which the key service does not speak).
func TestKeyOperatorPassesCheck(t *testing.T) {
	t.Setenv("KEYOPERATOR", testenv.Build(t, ".", "../cmd/keyoperator"))
	t.Setenv("KEYSERVICE", testenv.Build(t, ".", "../cmd/keyservice"))
	spec, err := check.Load("operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep := check.Test(t, spec, check.Options{Quick: true, Seed: 1})
	want := map[string]check.Verdict{}
	for _, n := range check.Names() {
		want[n] = check.Held
	}
	want[check.TransportStall] = check.Skipped
	want[check.ResultsStalled] = check.Skipped // no result-capture children
	want[check.Escaped] = check.Skipped        // the description gives no timeouts.sweep
	if diff := cmp.Diff(want, rep.Verdicts()); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
	runs, kills := rep.Runs()
	t.Logf("%d runs, %d kills in %s (%.1f runs a minute)", runs, kills, rep.Elapsed, rep.RunsPerMinute())
	if os.Getenv("FINALE_CHECK_REPORT") != "" {
		f, err := os.Create(os.Getenv("FINALE_CHECK_REPORT"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := rep.WriteMarkdown(f); err != nil {
			t.Fatal(err)
		}
	}
}
