package scenarios_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/scenarios"
)

// A short campaign with a real second kube-apiserver per world: its watch
// cache lags (0.1 to 10 s) or is cut off from etcd, and the operator's
// cache and writes fail over between it and the first, with the other
// faults; every invariant holds. Seed 11's six runs draw all three
// apiserver kinds.
func TestAPIServerCampaign(t *testing.T) {
	t.Parallel()
	opts := scenarios.CampaignOptions{Seed: 11, Runs: 6, APIServers: true}
	rep, _ := campaign(t, opts)
	for _, k := range []string{scenarios.FaultAPILag, scenarios.FaultAPIPartition, scenarios.FaultAPIFailover} {
		if rep.Faults[k] == 0 {
			t.Errorf("no %s injected in %d runs: %v", k, rep.Runs, rep.Faults)
		}
	}
	if diff := cmp.Diff([]scenarios.Violation(nil), rep.Violations); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

// Seed 528 of the 1,000-run campaign: the writes fail over to the second
// apiserver, which is then cut off from etcd, and the operator restarts:
// its setup cannot read the key Secret, so it does not start (a real one
// exits, and its pod is restarted). The campaign once counted that as a
// deletion that never finished; the operator stays down until the faults
// heal, then starts, and every deletion finishes.
func TestRestartWhileWritesCutOff(t *testing.T) {
	t.Parallel()
	opts := scenarios.CampaignOptions{Seed: 528, Runs: 1, Workers: 1, APIServers: true}
	rep, _ := campaign(t, opts)
	if rep.Faults[scenarios.FaultStartFailed] != 1 {
		t.Errorf("%s = %d, want 1 (the restart under the partition): %v", scenarios.FaultStartFailed, rep.Faults[scenarios.FaultStartFailed], rep.Faults)
	}
	if diff := cmp.Diff([]scenarios.Violation(nil), rep.Violations); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}
