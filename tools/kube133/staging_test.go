package kube133

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestEveryStagingModuleIsReplaced guards the one fact this module rests on:
// k8s.io/kubernetes requires its staging modules at v0.0.0 with local
// replaces that do not apply to a dependent module, so each must be replaced
// here with the published version. A new staging module in a future
// Kubernetes release would otherwise fail the build far from its cause.
func TestEveryStagingModuleIsReplaced(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-json", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/kubernetes: %v", err)
	}
	var mod struct {
		Version string
		GoMod   string
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	upstream, err := os.ReadFile(mod.GoMod)
	if err != nil {
		t.Fatal(err)
	}
	staging := regexp.MustCompile(`(?m)^\s*(k8s\.io/[\w.-]+) => \./staging/`).FindAllStringSubmatch(string(upstream), -1)
	if len(staging) == 0 {
		t.Fatalf("no staging replaces found in %s", mod.GoMod)
	}
	ours, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := "v0" + strings.TrimPrefix(mod.Version, "v1")
	for _, m := range staging {
		line := "replace " + m[1] + " => " + m[1] + " " + want
		if !strings.Contains(string(ours), line) {
			t.Errorf("go.mod lacks %q", line)
		}
	}
}
