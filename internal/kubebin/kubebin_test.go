package kubebin

import (
	"os"
	"path/filepath"
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

func TestStampChangesWithSource(t *testing.T) {
	src := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module x\nrequire k8s.io/kubernetes v1.37.2\n")
	write("cmd/etcd/main.go", "package main\n")
	write("README", "not hashed\n")
	a, err := stamp(src)
	if err != nil {
		t.Fatal(err)
	}
	write("README", "still not hashed\n")
	if b, _ := stamp(src); b != a {
		t.Fatal("stamp changed for a file that does not affect the build")
	}
	write("go.mod", "module x\nrequire k8s.io/kubernetes v1.37.3\n")
	if c, _ := stamp(src); c == a {
		t.Fatal("stamp did not change when the pinned version changed")
	}
}

func TestFindSourceFromRepo(t *testing.T) {
	src, err := findSource()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "cmd", "etcd", "main.go")); err != nil {
		t.Fatalf("findSource() = %s, which has no cmd/etcd: %v", src, err)
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
	if !present(dir) {
		t.Fatalf("Ensure returned %s without every binary", dir)
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
		t.Fatal("a second Ensure rebuilt kube-apiserver although nothing changed")
	}
}
