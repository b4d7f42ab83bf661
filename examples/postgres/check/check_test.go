// Package pgcheck_test runs finale check against the reference operator,
// as a process built from ./cmd/operator, with a real PostgreSQL as its
// external service and psql as the probe (operator.yaml, next to this
// test): the guarded build holds every experiment, and the naive build
// (--naive: no records, no hold, a pool that never evicts) breaks exactly
// the experiments those guarantees are for; with its sweeper alone off, it
// breaks escaped.
package pgcheck_test

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/check"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/pgserver"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard()) // the reports say what happened; the operators log to files
	testenv.Main(m)
}

// setup builds the operator (the second build of a run only links),
// starts the package's PostgreSQL and hands both to the description
// through the environment it reads.
func setup(t *testing.T) *check.Spec {
	t.Helper()
	operator := testenv.Build(t, ".", "../cmd/operator")
	pg := testenv.Postgres(t)
	t.Setenv("FINALE_OPERATOR", operator)
	t.Setenv("PGHOST", pg.Host)
	t.Setenv("PGPORT", strconv.Itoa(pg.Port))
	t.Setenv("PGUSER", pgserver.AdminUser)
	t.Setenv("PGPASSWORD", pg.Password)
	t.Setenv("PGCA_BASE64", base64.StdEncoding.EncodeToString(testenv.PostgresCA(t)))
	spec, err := check.Load("operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// every experiment, as held; changed by the caller.
func allHeld() map[string]check.Verdict {
	want := map[string]check.Verdict{}
	for _, n := range check.Names() {
		want[n] = check.Held
	}
	// PostgreSQL's protocol is not HTTP/2: transport-freeze is its
	// transport fault.
	want[check.TransportStall] = check.Skipped
	// Roles and Databases have no result-capture children.
	want[check.ResultsStalled] = check.Skipped
	return want
}

// The reference operator passes every experiment of finale check --quick.
func TestReferenceOperatorPassesCheck(t *testing.T) {
	spec := setup(t)
	rep := check.Test(t, spec, check.Options{Quick: true, Seed: 1})
	if diff := cmp.Diff(allHeld(), rep.Verdicts()); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
	runs, kills := rep.Runs()
	t.Logf("%d runs, %d kills in %s (%.1f runs a minute)", runs, kills, rep.Elapsed, rep.RunsPerMinute())
}

// The naive build breaks the experiments its missing guarantees are for,
// each named, and holds the others: without the hold and the records, the
// Server or its Secret deleted before the Roles (first, or in the
// foreground) leaks the roles, and so does an operator down past its
// timeouts; without eviction, a frozen connection wedges the Roles'
// deletion for good.
func TestNaiveBuildBreaks(t *testing.T) {
	spec := setup(t)
	spec.Operator.Command = append(spec.Operator.Command, "--naive")
	// A naive run that leaks waits the whole bound for a cleanup that
	// never comes; a shorter one keeps the test short.
	spec.Timeouts.Finish.Duration = spec.Timeouts.Finish.Duration / 3
	rep, err := check.Run(t.Context(), spec, check.Options{Quick: true, Seed: 1, Progress: testWriter{t}, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	want := allHeld()
	for _, n := range []string{
		check.OrderParentFirst, check.OrderSecretFirst, check.OrderForeground, // no hold, no record
		check.OperatorDown,    // no hold, no record, no sweeper
		check.Escaped,         // no record, no sweeper: what escaped stays
		check.TransportFreeze, // no eviction
	} {
		want[n] = check.Broke
	}
	got := rep.Verdicts()
	// All at once, the naive build races the namespace controller: its
	// Roles' cleanup through a connection it already holds may finish
	// before the Server goes (held), or not (broke: the roles leak). It
	// broke in 4 of the 5 runs seen; either is a true verdict.
	if v := got[check.OrderAllAtOnce]; v == check.Held || v == check.Broke {
		want[check.OrderAllAtOnce] = v
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("verdicts of the naive build (-want +got):\n%s", diff)
	}
	for _, e := range rep.Experiments {
		for _, r := range e.Runs {
			if r.Verdict == check.Broke && r.Reproduce == "" {
				t.Errorf("%s broke without a reproduction command", e.Name)
			}
		}
	}
}

// sweeperOff is the operator's flag that keeps its sweeper from ever
// acting (a lab setting for this test alone): a settle window of ten
// years, longer than any run, during which the sweeper leaves every
// record alone. The hold and the records stay on. A flag given twice
// takes its last value.
const sweeperOff = "--sweep-settle=87600h"

// A build whose sweeper never acts, the hold and the records on, breaks
// escaped and nothing else: only the sweeper cleans what escaped its
// owner's cleanup, and no other experiment needs it (the hold keeps the
// Server while its Roles clean up themselves).
func TestSweeperOffBreaksEscaped(t *testing.T) {
	spec := setup(t)
	spec.Operator.Command = append(spec.Operator.Command, sweeperOff)
	rep, err := check.Run(t.Context(), spec, check.Options{Quick: true, Seed: 1, Progress: testWriter{t}, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	want := allHeld()
	want[check.Escaped] = check.Broke
	if diff := cmp.Diff(want, rep.Verdicts()); diff != "" {
		t.Errorf("verdicts with the sweeper off (-want +got):\n%s", diff)
	}
	for _, e := range rep.Experiments {
		if e.Name != check.Escaped {
			continue
		}
		for _, r := range e.Runs {
			if _, ok := violation(r, check.NoLeak); !ok {
				t.Errorf("escaped run %d: no no-leak violation, want the escaped roles left: %v", r.Seed, r.Violations)
			}
		}
	}
}

// violation returns the run's violation of inv.
func violation(r check.RunReport, inv check.Invariant) (check.Violation, bool) {
	for _, v := range r.Violations {
		if v.Invariant == inv {
			return v, true
		}
	}
	return check.Violation{}, false
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
