package argocrd

import (
	"slices"
	"testing"
)

// Argo's CRDs come from the module, WorkflowTaskResults among them.
func TestCRDs(t *testing.T) {
	crds, err := CRDs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, c := range crds {
		kinds = append(kinds, c.Spec.Names.Kind)
	}
	for _, want := range []string{"Workflow", "WorkflowTaskResult", "WorkflowTaskSet", "WorkflowTemplate"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("CRDs: no %s among %v", want, kinds)
		}
	}
}
