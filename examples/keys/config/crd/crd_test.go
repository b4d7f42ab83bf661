package crd_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/examples/keys/config/crd"
)

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// TestGeneratedFilesUpToDate fails when the deepcopy code or the CRD YAML
// no longer match what controller-gen makes of the types: someone edited
// the types without `make generate`, or edited generated files by hand.
func TestGeneratedFilesUpToDate(t *testing.T) {
	root := filepath.Dir(goEnv(t, "GOMOD"))
	tmp := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "go", "run", crd.ControllerGen,
		"object", "paths=./examples/keys/api/...",
		"crd:crdVersions=v1",
		"output:object:dir="+filepath.Join(tmp, "object"),
		"output:crd:dir="+filepath.Join(tmp, "crd"))
	cmd.Dir = root
	// Tests reach no network but loopback: controller-gen comes from the
	// module cache, served as a file proxy. Modules there were verified
	// against the checksum database when they were downloaded, hence
	// GOSUMDB=off.
	cmd.Env = append(os.Environ(), "GOPROXY=file://"+filepath.ToSlash(goEnv(t, "GOMODCACHE"))+"/cache/download", "GOSUMDB=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run %s from the module cache: %v\n%s\nIf it is not in the cache, run `make controller-gen` once with network access.", crd.ControllerGen, err, out)
	}

	pairs := map[string]string{
		filepath.Join(tmp, "object", "zz_generated.deepcopy.go"): filepath.Join(root, "examples/keys/api/v1alpha1/zz_generated.deepcopy.go"),
	}
	names, err := crd.Files()
	if err != nil {
		t.Fatal(err)
	}
	generated, err := filepath.Glob(filepath.Join(tmp, "crd", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var genNames []string
	for _, g := range generated {
		genNames = append(genNames, filepath.Base(g))
		pairs[g] = filepath.Join(root, "examples/keys/config/crd", filepath.Base(g))
	}
	if diff := cmp.Diff(genNames, names); diff != "" {
		t.Errorf("CRD files differ from what controller-gen generates; run make generate (-want +got):\n%s", diff)
	}
	for gen, committed := range pairs {
		want, err := os.ReadFile(gen)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(committed)
		if err != nil {
			t.Errorf("%s: %v; run make generate", committed, err)
			continue
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s is stale; run make generate (-want +got):\n%s", committed, cmp.Diff(string(want), string(got)))
		}
	}
}
