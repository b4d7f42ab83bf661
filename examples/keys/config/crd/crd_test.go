package crd_test

import (
	"testing"

	"github.com/finale-dev/finale/examples/keys/config/crd"
	"github.com/finale-dev/finale/internal/crdfile/crdfiletest"
)

// TestGeneratedFilesUpToDate fails when the deepcopy code or the CRD YAML
// no longer match what controller-gen makes of the types.
func TestGeneratedFilesUpToDate(t *testing.T) {
	names, err := crd.Files()
	if err != nil {
		t.Fatal(err)
	}
	crdfiletest.CheckGenerated(t, "examples/keys", names)
}
