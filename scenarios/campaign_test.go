package scenarios_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/scenarios"
)

// Crash after every write and external call: every API write of a Role's
// and a Database's lifecycle, and an evenly spaced sample of its PostgreSQL
// statements (12 of a Role's ~56, 8 of a Database's ~61, to keep the suite's
// time; CrashAfterEveryWrite crashes after every one),
// enumerated by a recording run, is followed once by a crash and a clean
// restart; no run leaks, leaves a deletion unfinished or drops an untagged
// object.
func TestCrashAfterEveryWrite(t *testing.T) {
	t.Parallel()
	for kind, maxExternal := range map[scenarios.Kind]int{scenarios.KindRole: 12, scenarios.KindDatabase: 8} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			rep, err := scenarios.CrashCampaign(t.Context(), scenarios.CrashOptions{Kind: kind, MaxExternal: maxExternal}, env(t), &out)
			var table bytes.Buffer
			_ = rep.Table(&table)
			t.Logf("narration:\n%s\ntable:\n%s", out.String(), table.String())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Writes) < 4 {
				t.Fatalf("the recording run enumerated %d writes (%v); a lifecycle makes more, the campaign proves little", len(rep.Writes), rep.Writes)
			}
			if len(rep.Externals) < 4 {
				t.Fatalf("the recording run enumerated %d external calls (%v); a lifecycle makes more, the campaign proves little", len(rep.Externals), rep.Externals)
			}
			wantExternal := len(rep.Externals)
			if maxExternal > 0 {
				wantExternal = min(maxExternal, wantExternal)
			}
			if rep.ExternalRuns != wantExternal {
				t.Errorf("external crash runs %d, want %d of %d", rep.ExternalRuns, wantExternal, len(rep.Externals))
			}
			if points := len(rep.Writes) + rep.ExternalRuns; rep.Runs != points {
				t.Errorf("runs %d, want one per write and external call (%d)", rep.Runs, points)
			}
			if crashed, points := rep.Faults[scenarios.FaultCrash], len(rep.Writes)+rep.ExternalRuns; crashed < points/2 {
				t.Errorf("only %d of %d crash points were reached", crashed, points)
			}
			if diff := cmp.Diff([]scenarios.Violation(nil), rep.Violations); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
}

// A randomized campaign of 20 runs holds every invariant, and the same
// seed draws the same schedules.
func TestRandomizedCampaign(t *testing.T) {
	t.Parallel()
	opts := scenarios.CampaignOptions{Seed: 1, Runs: 20}
	rep, _ := campaign(t, opts)
	if rep.Runs != opts.Runs {
		t.Errorf("runs %d, want %d", rep.Runs, opts.Runs)
	}
	var faults int
	for _, n := range rep.Faults {
		faults += n
	}
	if faults < opts.Runs {
		t.Errorf("%d faults injected in %d runs: %v", faults, opts.Runs, rep.Faults)
	}
	if diff := cmp.Diff([]scenarios.Violation(nil), rep.Violations); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	t.Logf("%d runs in %s: %.1f runs per minute", rep.Runs, rep.Elapsed, rep.RunsPerMinute())
}

// Against the naive build the same campaign catches leaks, and reports each
// failing run with a seed that replays it alone.
func TestNaiveCampaignReportsReplayableSeeds(t *testing.T) {
	t.Parallel()
	opts := scenarios.CampaignOptions{Seed: 100, Runs: 4, Naive: true}
	rep, table := campaign(t, opts)
	if len(rep.Failed) == 0 || !rep.OK() {
		t.Fatalf("the naive build broke no invariant in %d runs; the campaign's checks prove nothing", rep.Runs)
	}
	for _, f := range rep.Failed {
		if f.Seed != opts.Seed+int64(f.Run) || len(f.Schedule) != scenarios.DefaultSteps {
			t.Errorf("failing run %d: seed %d, schedule %q; want seed %d and %d steps", f.Run, f.Seed, f.Schedule, opts.Seed+int64(f.Run), scenarios.DefaultSteps)
		}
		if !strings.Contains(table, fmt.Sprintf("seed %d", f.Seed)) {
			t.Errorf("table does not print the failing seed %d", f.Seed)
		}
	}
}
