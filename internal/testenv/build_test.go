package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBuildAsTheTestBinary: a command built for a test is built with -race
// exactly when the test binary is, so that it reuses the test build's
// compiled packages (run with and without -race to see both sides).
func TestBuildAsTheTestBinary(t *testing.T) {
	bin := Build(t, ".", "./testdata/hello")
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m %s: %v\n%s", bin, err, out)
	}
	if got, want := strings.Contains(string(out), "-race=true"), raceBuilt(); got != want {
		t.Errorf("the command built with -race: %t, the test binary: %t\n%s", got, want, out)
	}
}
