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

const toolsKube = "../../tools/kube"

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

// TestArchiveIsToolsKube fails whenever tools/kube changed and the
// embedded copy was not made again: a user's build (from the archive)
// would then differ from a checkout's tests.
func TestArchiveIsToolsKube(t *testing.T) {
	want, err := Pack(os.DirFS(toolsKube))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(archive, want) {
		return
	}
	got, err := binbuild.Unpack(archive)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(contents(t, os.DirFS(toolsKube)), contents(t, got)); diff != "" {
		t.Fatalf("%s differs from tools/kube (-tools/kube +embedded); run make kube-embed and commit it:\n%s", ArchiveName, diff)
	}
	t.Fatalf("%s holds tools/kube's files but not as make kube-embed writes them; run make kube-embed", ArchiveName)
}

// The cache is shared between a checkout and every module that depends on
// finale: the stamp must not depend on where the build module is read.
func TestStampIsTheCheckoutsStamp(t *testing.T) {
	s, err := Spec(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := s.Stamp()
	if err != nil {
		t.Fatal(err)
	}
	s.Source = os.DirFS(toolsKube)
	checkout, err := s.Stamp()
	if err != nil {
		t.Fatal(err)
	}
	if embedded != checkout {
		t.Fatalf("stamp from the archive %s, from tools/kube %s", embedded, checkout)
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
