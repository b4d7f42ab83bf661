package testenv

import (
	"debug/buildinfo"
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBuildAsTheTestBinary: a command built for a test is compiled with the
// test binary's -race, -gcflags and -tags, so that it reuses the test
// build's compiled packages (run it with and without -race and
// -gcflags=all=-dwarf=false to see both sides).
func TestBuildAsTheTestBinary(t *testing.T) {
	bin := Build(t, ".", "./testdata/hello")
	built, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	self, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("the test binary has no build information")
	}
	if diff := cmp.Diff(compiledWith(self), compiledWith(built)); diff != "" {
		t.Errorf("the command's compile settings against the test binary's (-want +got):\n%s", diff)
	}
}
