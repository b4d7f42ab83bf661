package scenarios_test

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/scenarios"
)

func TestMain(m *testing.M) {
	scenarios.ReplicaMain() // the failover scenario's replicas are this binary
	if p := os.Getenv("SCENARIOS_LOG"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			panic(err)
		}
		ctrl.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(f, prefix, args) }, funcr.Options{}))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	testenv.Main(m)
}

func env(t *testing.T) scenarios.Env {
	t.Helper()
	return scenarios.Env{ControlPlane: testenv.ControlPlane(t), Postgres: testenv.Postgres(t)}
}

// campaign runs a campaign on the shared stack, logs its narration and
// table, and fails the test at once if the campaign could not run; the
// table is returned for tests that read it.
func campaign(t *testing.T, opts scenarios.CampaignOptions) (scenarios.CampaignReport, string) {
	t.Helper()
	var out bytes.Buffer
	rep, err := scenarios.Campaign(t.Context(), opts, env(t), &out)
	var table bytes.Buffer
	_ = rep.Table(&table)
	t.Logf("narration:\n%s\ntable:\n%s", out.String(), table.String())
	if err != nil {
		t.Fatal(err)
	}
	return rep, table.String()
}

// Each seed scenario holds its invariants with the guarantee on and breaks
// them with it off: both directions, or the scenario proves nothing.
func TestSeedScenarios(t *testing.T) {
	for _, name := range []string{scenarios.PoisonedClient, scenarios.NamespaceDeletion, scenarios.LaggingOwner} {
		for _, variant := range []string{name, name + scenarios.NaiveSuffix} {
			t.Run(variant, func(t *testing.T) {
				var out bytes.Buffer
				r, err := scenarios.Run(t.Context(), variant, env(t), &out)
				var table bytes.Buffer
				_ = r.Table(&table)
				t.Logf("narration:\n%s\ntable:\n%s", out.String(), table.String())
				if err != nil {
					t.Fatal(err)
				}
				naive := variant != name
				if naive && len(r.Violations) == 0 {
					t.Errorf("%s: no invariant broke with the guarantee off; the scenario proves nothing", variant)
				}
				if !naive && len(r.Violations) > 0 {
					t.Errorf("%s: invariants broken: %v", variant, r.Violations)
				}
				if !r.OK() {
					t.Errorf("Result.OK() = false for %s", variant)
				}
			})
		}
	}
}

// The G1 seed on its own stack, both directions: the package's Temporal
// server is shared by the two runs.
func TestTemporalScenarios(t *testing.T) {
	for _, variant := range []string{scenarios.TemporalPoisonedClient, scenarios.TemporalPoisonedClient + scenarios.NaiveSuffix} {
		t.Run(variant, func(t *testing.T) {
			e := env(t)
			ts := testenv.Temporal(t)
			e.Temporal = scenarios.TemporalServer{HostPort: ts.HostPort, Namespace: ts.Namespace}
			var out bytes.Buffer
			r, err := scenarios.Run(t.Context(), variant, e, &out)
			var table bytes.Buffer
			_ = r.Table(&table)
			t.Logf("narration:\n%s\ntable:\n%s", out.String(), table.String())
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK() {
				t.Errorf("%s: violations %v; want none for the guarded build, some for the naive one", variant, r.Violations)
			}
		})
	}
}
