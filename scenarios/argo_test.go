package scenarios_test

import (
	"bytes"
	"testing"

	"github.com/finale-dev/finale/scenarios"
)

// G3 on the stock Argo controller: with the guard the node keeps its
// result; the stock controller alone loses it. Both directions, or the
// scenario proves nothing.
func TestArgoStatusCapture(t *testing.T) {
	for _, variant := range []string{scenarios.ArgoStatusCapture, scenarios.ArgoStatusCaptureNaive} {
		t.Run(variant, func(t *testing.T) {
			var out bytes.Buffer
			r, err := scenarios.Run(t.Context(), variant, env(t), &out)
			var table bytes.Buffer
			_ = r.Table(&table)
			t.Logf("narration:\n%s\ntable:\n%s", out.String(), table.String())
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK() {
				t.Errorf("%s: violations %v, expected some: %v", variant, r.Violations, r.ExpectViolations)
			}
		})
	}
}
