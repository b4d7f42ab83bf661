package argobin

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestDirHonoursEnv(t *testing.T) {
	d := t.TempDir()
	t.Setenv(EnvDir, d)
	got, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	if got != d {
		t.Fatalf("Dir() = %q, want %q", got, d)
	}
}

// The exemption from checksum verification is exactly one module path.
func TestOnlyOneModuleIsExempted(t *testing.T) {
	s, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	var exempt []string
	for _, e := range s.Env {
		if v, ok := strings.CutPrefix(e, "GONOSUMDB="); ok {
			exempt = append(exempt, strings.Split(v, ",")...)
		}
		if strings.HasPrefix(e, "GONOSUMCHECK=") || strings.HasPrefix(e, "GOFLAGS=") || strings.HasPrefix(e, "GOSUMDB=") || strings.HasPrefix(e, "GOPRIVATE=") || strings.HasPrefix(e, "GONOPROXY=") {
			t.Errorf("build environment sets %s; only GONOSUMDB for one module is allowed", e)
		}
	}
	if !slices.Equal(exempt, []string{NoSumDB}) {
		t.Errorf("GONOSUMDB exempts %q, want exactly [%s]", exempt, NoSumDB)
	}
}

// The built controller runs and reports the pinned version; a second
// Ensure finds it current and does not rebuild.
func TestEnsureBuildsTheStampedController(t *testing.T) {
	dir, err := Ensure(t.Context(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	bin := Path(dir, WorkflowController)
	before, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	if !strings.Contains(string(out), Version) {
		t.Errorf("%s version does not name %s:\n%s", bin, Version, out)
	}
	if _, err := Ensure(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("Ensure rebuilt a controller that was current")
	}
}
