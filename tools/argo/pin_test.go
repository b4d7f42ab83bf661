package argo

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPinnedController guards what internal/argobin relies on: the module
// builds the workflow-controller of argo-workflows v4.1.4 (the version the
// stamp, the cache directory and the CRDs are named after), as a tool.
func TestPinnedController(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-json", "github.com/argoproj/argo-workflows/v4").Output()
	if err != nil {
		t.Fatalf("go list -m argo-workflows: %v", err)
	}
	var mod struct{ Version string }
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	if mod.Version != "v4.1.4" {
		t.Errorf("argo-workflows is at %s, want v4.1.4 (change internal/argobin.Version with it)", mod.Version)
	}
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gomod), "\ntool github.com/argoproj/argo-workflows/v4/cmd/workflow-controller\n") {
		t.Error("go.mod lacks the tool line for cmd/workflow-controller")
	}
}
