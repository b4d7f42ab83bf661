// Package crdfiletest checks an example's generated files against what the
// pinned controller-gen makes of its types, for the examples' drift tests.
package crdfiletest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ControllerGen is the controller-gen the examples' files are generated
// with (the Makefile's `make generate` pins the same version).
const ControllerGen = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0"

// CheckGenerated fails t when example's deepcopy code
// (EXAMPLE/api/v1alpha1/zz_generated.deepcopy.go) or CRD YAML
// (EXAMPLE/config/crd; committed names those files) differ from what
// ControllerGen generates from EXAMPLE/api: someone edited the types without
// `make generate`, or edited generated files by hand. example is a path from
// the root of the test's module: "examples/keys" in the library module,
// "." in an example that is a module of its own.
func CheckGenerated(t *testing.T, example string, committed []string) {
	t.Helper()
	root := filepath.Dir(goEnv(t, "GOMOD"))
	tmp := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "go", "run", ControllerGen,
		"object", "paths=./"+filepath.ToSlash(filepath.Join(example, "api"))+"/...",
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
		t.Fatalf("run %s from the module cache: %v\n%s\nIf it is not in the cache, run `make controller-gen` once with network access.", ControllerGen, err, out)
	}

	pairs := map[string]string{
		filepath.Join(tmp, "object", "zz_generated.deepcopy.go"): filepath.Join(root, example, "api/v1alpha1/zz_generated.deepcopy.go"),
	}
	generated, err := filepath.Glob(filepath.Join(tmp, "crd", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var genNames []string
	for _, g := range generated {
		genNames = append(genNames, filepath.Base(g))
		pairs[g] = filepath.Join(root, example, "config/crd", filepath.Base(g))
	}
	if diff := cmp.Diff(genNames, committed); diff != "" {
		t.Errorf("CRD files differ from what controller-gen generates; run make generate (-want +got):\n%s", diff)
	}
	for gen, file := range pairs {
		want, err := os.ReadFile(gen)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v; run make generate", file, err)
			continue
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s is stale; run make generate (-want +got):\n%s", file, cmp.Diff(string(want), string(got)))
		}
	}
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}
