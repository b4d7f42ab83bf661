package testenv

import (
	"os/exec"
	"path"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// Build compiles the command pkg (an import path, or a directory relative
// to dir) in dir, the module it belongs to, into a temporary directory of
// t's and returns the binary's path.
//
// It builds with -race when the test binary was built with it. The
// command then reuses the packages the test's own build compiled, where a
// plain build compiles all its dependencies a second time: 7.6 CPU-minutes
// for the reference operator on a cold cache, which make test's cold run
// paid once per such command. A data race in the command then also shows
// in its output.
func Build(t testing.TB, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), path.Base(pkg))
	args := []string{"build", "-o", out}
	if raceBuilt() {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, b)
	}
	return out
}

// raceBuilt reports whether the running binary was built with -race, as
// its build information records.
func raceBuilt() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
