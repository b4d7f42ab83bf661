package kubebin

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/internal/binbuild"
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
	// The variable names Current's directory only: two releases in one
	// directory would rebuild each other's binaries in turn.
	old, err := Oldest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	if old == d {
		t.Fatalf("Oldest.Dir() = %q, the directory of $%s", old, EnvDir)
	}
}

func TestLookup(t *testing.T) {
	for v, want := range map[string]string{
		"": Current.Kubernetes, "v1.37.2": "v1.37.2", "1.37": "v1.37.2", "v1.33": "v1.33.13", "1.33.13": "v1.33.13",
	} {
		got, err := Lookup(v)
		if err != nil {
			t.Errorf("Lookup(%q): %v", v, err)
			continue
		}
		if got.Kubernetes != want {
			t.Errorf("Lookup(%q) = %s, want %s", v, got.Kubernetes, want)
		}
	}
	for _, v := range []string{"v1.32", "v1.33.1", "latest"} {
		if r, err := Lookup(v); err == nil {
			t.Errorf("Lookup(%q) = %s, want an error", v, r.Kubernetes)
		}
	}
}

// TestArchiveIsToolsKube fails whenever tools/kube (or tools/kube133)
// changed and the embedded copy was not made again: a user's build (from
// the archive) would then differ from a checkout's tests.
func TestArchiveIsToolsKube(t *testing.T) {
	for _, r := range Releases() {
		t.Run(r.Kubernetes, func(t *testing.T) {
			tools := os.DirFS(filepath.Join("..", "..", filepath.FromSlash(r.Tools)))
			want, err := r.Pack(tools)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(r.EmbeddedArchive(), want) {
				return
			}
			got, err := r.Source()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(contents(t, tools), contents(t, got)); diff != "" {
				t.Fatalf("%s differs from %s (-checkout +embedded); run make kube-embed and commit it:\n%s", r.Archive, r.Tools, diff)
			}
			t.Fatalf("%s holds %s's files but not as make kube-embed writes them; run make kube-embed", r.Archive, r.Tools)
		})
	}
}

// The cache is shared between a checkout and every module that depends on
// finale: the stamp must not depend on where the build module is read.
func TestStampIsTheCheckoutsStamp(t *testing.T) {
	for _, r := range Releases() {
		s, err := r.Spec(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		embedded, err := s.Stamp()
		if err != nil {
			t.Fatal(err)
		}
		s.Source = os.DirFS(filepath.Join("..", "..", filepath.FromSlash(r.Tools)))
		checkout, err := s.Stamp()
		if err != nil {
			t.Fatal(err)
		}
		if embedded != checkout {
			t.Fatalf("%s: stamp from the archive %s, from %s %s", r.Kubernetes, embedded, r.Tools, checkout)
		}
	}
}

// Binaries left by another build (an old finale, a hand copy) are not
// current, whatever their names: Ensure rebuilds them.
func TestBinariesWithoutOurStampAreNotCurrent(t *testing.T) {
	dir := t.TempDir()
	s, err := Spec(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range s.Targets {
		if err := os.WriteFile(Path(dir, tg.Name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want, err := s.Stamp()
	if err != nil {
		t.Fatal(err)
	}
	if s.Current(want) {
		t.Fatal("binaries without a stamp count as current")
	}
	if err := os.WriteFile(filepath.Join(dir, "stamp"), []byte("a stamp of another build"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s.Current(want) {
		t.Fatal("binaries with another build's stamp count as current")
	}
}

func TestEnsureIsANoOpWhenCurrent(t *testing.T) {
	// The real cache was filled by `make kube` (or by an earlier Ensure);
	// a second Ensure must find it current and not rebuild. It takes the
	// same lock, so a concurrent build elsewhere only delays it.
	dir, err := Ensure(t.Context(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(Path(dir, KubeAPIServer))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(t.Context(), "", nil); err != nil {
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

func contents(t *testing.T, src fs.FS) map[string]string {
	t.Helper()
	files, err := binbuild.Files(src)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range files {
		b, err := fs.ReadFile(src, p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = string(b)
	}
	return out
}

// A release's versions are what its build module builds: the cache
// directory and the version stamps are named after them.
func TestReleaseVersionsAreTheModules(t *testing.T) {
	for _, r := range Releases() {
		src, err := r.Source()
		if err != nil {
			t.Fatal(err)
		}
		mod, err := fs.ReadFile(src, "go.mod")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"k8s.io/kubernetes " + r.Kubernetes, "go.etcd.io/etcd/server/v3 " + r.Etcd} {
			if !bytes.Contains(mod, []byte(want)) {
				t.Errorf("%s/go.mod does not require %s", r.Tools, want)
			}
		}
	}
}
