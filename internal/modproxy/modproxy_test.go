package modproxy

import (
	"archive/zip"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"

	"github.com/finale-dev/finale/internal/testenv"
)

// root is this module's root, seen from this package's directory.
const root = "../.."

func TestPublishedZipIsWhatAProxyServes(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	mv, err := Publish(a, root)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Publish(b, root)
	if err != nil {
		t.Fatal(err)
	}
	if again != mv {
		t.Fatalf("the same tree published as %s and %s: the version must follow the content", mv, again)
	}
	if !module.IsPseudoVersion(mv.Version) {
		t.Errorf("version %s is not a pseudo-version", mv.Version)
	}
	esc, _ := module.EscapePath(mv.Path)
	vdir := filepath.Join(a, esc, "@v")
	for _, name := range []string{"list", mv.Version + ".info", mv.Version + ".mod", mv.Version + ".zip"} {
		if _, err := os.Stat(filepath.Join(vdir, name)); err != nil {
			t.Errorf("the proxy lacks %s: %v", name, err)
		}
	}
	body, err := os.ReadFile(filepath.Join(vdir, mv.Version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	prefix := mv.String() + "/"
	have := map[string]bool{}
	for _, f := range zr.File {
		name := strings.TrimPrefix(f.Name, prefix)
		have[name] = true
		for _, nested := range []string{"tools/", "internal/modproxy/testdata/consumer/", "examples/postgres/", "examples/temporal/", "examples/argo/", "scenarios/"} {
			if strings.HasPrefix(name, nested) {
				t.Errorf("the zip holds %s, a file of a nested module", name)
			}
		}
	}
	for _, name := range []string{"go.mod", "internal/kubebin/module.txtar", "controlplane/kubeinstall/main.go"} {
		if !have[name] {
			t.Errorf("the zip lacks %s", name)
		}
	}
}

// TestConsumer proves adoption the way it happens: a module of a user's,
// outside this tree, gets finale from a module proxy (a file-based one
// holding this tree's zip, ahead of the real one for everything else),
// and its real-stack test starts the control plane through testenv, runs
// the key service and operator of examples/keys as imported from the zip,
// deletes a namespace of APIKeys and finds nothing leaked. The Kubernetes
// binaries are built from what the zip carries; the stamp makes the cache
// shared with this module's own tests current, so the check costs builds
// and one control plane, not a Kubernetes build.
func TestConsumer(t *testing.T) {
	proxy := t.TempDir()
	start := time.Now()
	mv, err := Publish(proxy, root)
	if err != nil {
		t.Fatal(err)
	}
	env, err := Env(proxy, mv)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("published %s in %s", mv, time.Since(start).Round(time.Millisecond))
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/consumer")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		// The command controlplane's doc gives users, from the module
		// cache: with the binaries current it only checks the stamp.
		{"run", mv.Path + "/controlplane/kubeinstall@" + mv.Version},
		{"mod", "edit", "-require=" + mv.String()},
		{"mod", "tidy"},
		{"check pins"},
		// -vet=off as make test runs: vet is make vet's, and go test's
		// own would analyse every dependency again. The consumer is
		// compiled as this test was (make test: -race
		// -gcflags=all=-dwarf=false), so that it finds the library's
		// dependencies, at the same versions, in the build cache.
		append(append([]string{"test", "-race"}, testenv.CompileFlags()...), "-count=1", "-vet=off", "-timeout=15m", "-v", "./..."),
	} {
		if args[0] == "check pins" {
			checkPins(t, dir)
			continue
		}
		step := time.Now()
		cmd := exec.CommandContext(t.Context(), "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		t.Logf("go %s (%s):\n%s", strings.Join(args, " "), time.Since(step).Round(time.Millisecond), out)
		if err != nil {
			t.Fatalf("go %s in the consumer module: %v", strings.Join(args, " "), err)
		}
	}
	t.Logf("consumer check: %s in all", time.Since(start).Round(time.Millisecond))
}

// pinned is what the consumer's go.mod asks for before finale is added;
// adding finale must move none of it.
var pinned = map[string]string{
	"go":                             "1.24.0",
	"k8s.io/api":                     "v0.33.0",
	"k8s.io/apimachinery":            "v0.33.0",
	"k8s.io/client-go":               "v0.33.0",
	"sigs.k8s.io/controller-runtime": "v0.21.0",
}

// dragged are modules only finale's examples need: a consumer of the
// library must not get them, not even in go.sum.
var dragged = []string{"github.com/jackc/pgx", "go.temporal.io/", "github.com/argoproj/"}

// checkPins fails t when go mod tidy moved a pin of the consumer's or
// brought in what only finale's examples need.
func checkPins(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{"go": f.Go.Version}
	for _, r := range f.Require {
		if _, ok := pinned[r.Mod.Path]; ok {
			got[r.Mod.Path] = r.Mod.Version
		}
	}
	if diff := cmp.Diff(pinned, got); diff != "" {
		t.Errorf("adding finale moved the consumer's pins (-want +got):\n%s", diff)
	}
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(sum), "\n") {
		for _, d := range dragged {
			if strings.HasPrefix(line, d) {
				t.Errorf("the consumer's go.sum holds %q: the library module must not require it", line)
			}
		}
	}
}
