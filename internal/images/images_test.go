package images

import (
	"bytes"
	"debug/elf"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/internal/ociimage"
)

// root is the repository's root from this package's directory.
const root = "../.."

// makeVersion is the release VERSION the Makefile defines.
func makeVersion(t *testing.T, makefile string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^VERSION\s*\?=\s*(\S+)\s*$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile defines no VERSION ?= TAG")
	}
	return m[1]
}

// imageLine is an image: field of a manifest.
var imageLine = regexp.MustCompile(`(?m)^\s*(?:-\s+)?image:\s*["']?([^"'\s#]+)`)

// TestManifestsAgree: every image a manifest in the repository pulls is
// one of All, tagged with the Makefile's VERSION, and the Makefile builds
// each of All (make NAME-image, all of them in make images) at VERSION.
func TestManifestsAgree(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	makefile := string(mk)
	version := makeVersion(t, makefile)

	// What the manifests pull, by file.
	pulled := map[string][]string{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(p); d.IsDir() || (ext != ".yaml" && ext != ".yml") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range imageLine.FindAllStringSubmatch(string(b), -1) {
			rel, _ := filepath.Rel(root, p)
			pulled[m[1]] = append(pulled[m[1]], rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	built := map[string][]string{}
	for _, img := range All {
		ref, _, err := Ref(root, img, version)
		if err != nil {
			t.Errorf("%s: %v", img.Name, err)
			continue
		}
		built[ref] = []string{img.Manifest}
		target := img.Name + "-image"
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).MatchString(makefile) {
			t.Errorf("the Makefile has no target %s", target)
		}
		if !regexp.MustCompile(`(?m)^images:.*\b` + regexp.QuoteMeta(target) + `\b`).MatchString(makefile) {
			t.Errorf("make images does not build %s", target)
		}
		if tag := ociimage.Tag(ref); tag != version {
			t.Errorf("%s pulls %s, tagged %s; VERSION is %s", img.Manifest, ref, tag, version)
		}
	}
	if diff := cmp.Diff(built, pulled); diff != "" {
		t.Errorf("images the manifests pull (image: fields, by file) against those make images builds (-built +pulled):\n%s", diff)
	}
	// Every build passes VERSION: the image is tagged with the release.
	for _, line := range regexp.MustCompile(`(?m)^\t.*imagebuild.*$`).FindAllString(makefile, -1) {
		if !strings.Contains(line, "-version $(VERSION)") {
			t.Errorf("a Makefile build does not pass -version $(VERSION):\n%s", line)
		}
	}
}

// Ref refuses a manifest the image cannot be built for.
func TestRefRefuses(t *testing.T) {
	guard, _ := ByName("guard")
	b, err := os.ReadFile(filepath.Join(root, guard.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ old, new, version, want string }{
		"no tag":       {"finale-argo-guard:v0.1.0", "finale-argo-guard", "", "without a tag"},
		"other tag":    {"finale-argo-guard:v0.1.0", "finale-argo-guard:v0.0.9", "v0.1.0", "tagged v0.0.9, but the version is v0.1.0"},
		"no container": {"- name: guard", "- name: other", "", "no container named guard"},
		"no user":      {"runAsUser: 65532", "", "", "runAsUser"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, guard.Manifest)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(strings.Replace(string(b), tc.old, tc.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, _, err := Ref(dir, guard, tc.version); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Ref = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestBuild builds a small command's image as make images builds finale's
// and checks what a cluster would run: the index names the manifest's
// image, the config runs the binary as the Pod's user, and the binary,
// taken out of the layer, is static and runs. (examples/argo's guard-image
// test does the same for the guard itself.)
func TestBuild(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("the image's binary is for linux and this test runs it; GOOS is %s", runtime.GOOS)
	}
	img := Image{Name: "hello", Module: "mod", Package: "./cmd/hello", Manifest: "deploy.yaml", Container: "hello", Binary: "/hello"}
	repo := filepath.Join("testdata", "repo")
	if _, err := Build(repo, img, "v0.2.0", filepath.Join(t.TempDir(), "x"), runtime.GOARCH); err == nil || !strings.Contains(err.Error(), "but the version is v0.2.0") {
		t.Errorf("Build at another version = %v, want it refused", err)
	}
	dir := filepath.Join(t.TempDir(), "hello-image")
	b, err := Build(repo, img, "v0.1.0", dir, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := ociimage.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantAnn := map[string]string{ociimage.AnnotationImageName: "example.com/hello:v0.1.0", ociimage.AnnotationRefName: "v0.1.0"}
	if diff := cmp.Diff(wantAnn, loaded.Descriptor.Annotations); diff != "" {
		t.Errorf("the image's name and tag (-want +got):\n%s", diff)
	}
	wantRun := ociimage.RuntimeConfig{Entrypoint: []string{"/hello"}, User: "65532:65532", WorkingDir: "/"}
	if diff := cmp.Diff(wantRun, loaded.Config.Config); diff != "" {
		t.Errorf("runtime config (-want +got):\n%s", diff)
	}
	if fi, err := os.Stat(b.Archive); err != nil || fi.Size() == 0 {
		t.Errorf("OCI archive %s: %v", b.Archive, err)
	}
	f, err := loaded.File("/hello")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "hello")
	if err := os.WriteFile(bin, f.Data, f.Mode); err != nil {
		t.Fatal(err)
	}
	e, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(e.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
		t.Error("/hello asks for a dynamic loader: not static, and the image has no libc")
	}
	_ = e.Close()
	var out bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.HasPrefix(out.String(), "hello as ") {
		t.Errorf("/hello: %v\n%s", err, out.String())
	}
	// A second build replaces the layout; a directory that is not one is
	// refused.
	if _, err := Build(repo, img, "", dir, runtime.GOARCH); err != nil {
		t.Errorf("rebuild into the previous layout: %v", err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(repo, img, "", other, runtime.GOARCH); err == nil || !strings.Contains(err.Error(), "neither empty nor an image layout") {
		t.Errorf("Build into a directory holding other files = %v, want it refused", err)
	}
}
