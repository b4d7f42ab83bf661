package kubebin

import (
	"os"
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

func TestEnsureIsANoOpWhenCurrent(t *testing.T) {
	// The real cache was filled by `make kube` (or by an earlier Ensure);
	// a second Ensure must find it current and not rebuild. It takes the
	// same lock, so a concurrent build elsewhere only delays it.
	dir, err := Ensure(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(Path(dir, KubeAPIServer))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(Path(dir, KubeAPIServer))
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("Ensure rebuilt binaries that were current")
	}
}
