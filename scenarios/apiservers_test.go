package scenarios_test

import (
	"bytes"
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
	var out bytes.Buffer
	rep, err := scenarios.Campaign(t.Context(), opts, env(t), &out)
	var table bytes.Buffer
	_ = rep.Table(&table)
	t.Logf("narration:\n%s\ntable:\n%s", out.String(), table.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{scenarios.FaultAPILag, scenarios.FaultAPIPartition, scenarios.FaultAPIFailover} {
		if rep.Faults[k] == 0 {
			t.Errorf("no %s injected in %d runs: %v", k, rep.Runs, rep.Faults)
		}
	}
	if diff := cmp.Diff([]scenarios.Violation(nil), rep.Violations); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}
