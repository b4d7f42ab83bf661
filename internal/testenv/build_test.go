package testenv

import (
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBuildAsTheTestBinary: a command built for a test is compiled with the
// test binary's -race, -gcflags and -tags, so that it reuses the test
// build's compiled packages (run it with and without -race and
// -gcflags=all=-dwarf=false to see both sides).
func TestBuildAsTheTestBinary(t *testing.T) {
	bin := Build(t, ".", "./testdata/hello")
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m %s: %v\n%s", bin, err, out)
	}
	// go version -m prints one "build\tKEY=VALUE" line per setting.
	got := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.SplitN(strings.TrimSpace(l), "\t", 2)
		if len(f) != 2 || f[0] != "build" {
			continue
		}
		if k, v, ok := strings.Cut(f[1], "="); ok && slices.Contains(compileSettings, k) {
			got[k] = v
		}
	}
	want := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("the test binary has no build information")
	}
	for _, s := range bi.Settings {
		if slices.Contains(compileSettings, s.Key) {
			want[s.Key] = s.Value
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the command's compile settings against the test binary's (-want +got):\n%s", diff)
	}
}
