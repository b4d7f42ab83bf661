package testenv

import (
	"os/exec"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// Build compiles the command pkg (an import path, or a directory relative
// to dir) in dir, the module it belongs to, into a temporary directory of
// t's and returns the binary's path.
//
// It builds with the test binary's CompileFlags. The command then reuses
// the packages the test's own build compiled, where a plain build compiles
// all its dependencies a second time: 7.6 CPU-minutes for the reference
// operator on a cold cache, which make test's cold run paid once per such
// command. A data race in the command then also shows in its output.
func Build(t testing.TB, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), path.Base(pkg))
	args := append(append([]string{"build", "-o", out}, CompileFlags()...), pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, b)
	}
	return out
}

// compileSettings are the build settings that decide how packages are
// compiled: a build given the same ones finds the running binary's packages
// in the build cache.
var compileSettings = []string{"-race", "-gcflags", "-tags"}

// compiledWith returns bi's compile settings, in bi's order.
func compiledWith(bi *debug.BuildInfo) []debug.BuildSetting {
	var out []debug.BuildSetting
	for _, s := range bi.Settings {
		if slices.Contains(compileSettings, s.Key) {
			out = append(out, s)
		}
	}
	return out
}

// CompileFlags returns the flags the running binary was built with that
// decide how packages are compiled (-race, -gcflags, -tags, as its build
// information records them), for a go build or go test run from a test
// that should reuse the test's own compiled packages: make test compiles
// with -race -gcflags=all=-dwarf=false, and a command built without them
// compiles every dependency again.
func CompileFlags() []string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	var flags []string
	for _, s := range compiledWith(bi) {
		flags = append(flags, s.Key+"="+s.Value) // -race=true is a valid flag too
	}
	return flags
}
