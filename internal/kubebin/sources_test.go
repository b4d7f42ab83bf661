package kubebin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A stand-in binary: a shell script that prints its version as the real
// one does and, when run in any other way, leaves a mark, so a test can
// tell that a binary was never run. Stand-ins are enough here: what is
// tested is which source Ensure takes each binary from and what it refuses;
// the real binaries from every source run in the real-stack tests.
func standIn(version, mark string) []byte {
	return []byte(fmt.Sprintf(`#!/bin/sh
case "$1" in
--version) echo "Kubernetes %[1]s"; exit 0;;
version) echo "Client Version: %[1]s"; exit 0;;
esac
touch %[2]q
`, version, mark))
}

// mirror serves files laid out as dl.k8s.io serves them, and counts the
// requests.
type mirror struct {
	*httptest.Server
	mu    sync.Mutex // guards files and asked
	files map[string][]byte
	asked []string
}

func newMirror(t *testing.T) *mirror {
	m := &mirror{files: map[string][]byte{}}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.asked = append(m.asked, r.URL.Path)
		b, ok := m.files[r.URL.Path]
		m.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(m.Close)
	return m
}

// publish puts a binary and its .sha256 (of sum, when given, else of b)
// under the release path of version v.
func (m *mirror) publish(v, name string, b []byte, sum string) {
	p := "/release/" + v + "/bin/" + runtime.GOOS + "/" + runtime.GOARCH + "/" + name
	if sum == "" {
		s := sha256.Sum256(b)
		sum = hex.EncodeToString(s[:])
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[p] = b
	m.files[p+".sha256"] = []byte(sum + "\n")
}

func (m *mirror) requests() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.asked)
}

// fakeBuild records what it was asked to build and writes stand-ins into
// a directory of its own, as binbuild writes into Dir/.build.
type fakeBuild struct {
	dir   string
	mu    sync.Mutex // guards calls
	calls [][]string
}

func (f *fakeBuild) build(_ context.Context, names []string, _ io.Writer) (string, error) {
	f.mu.Lock()
	f.calls = append(f.calls, slices.Clone(names))
	f.mu.Unlock()
	for _, n := range names {
		if err := os.WriteFile(Path(f.dir, n), []byte("#!/bin/sh\n# built "+n+"\n"), 0o755); err != nil {
			return "", err
		}
	}
	return f.dir, nil
}

func (f *fakeBuild) asked() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func testInstaller(t *testing.T, releaseURL string, envtest ...string) (*Installer, *fakeBuild, *bytes.Buffer) {
	t.Helper()
	fb := &fakeBuild{dir: t.TempDir()}
	var log bytes.Buffer
	in := &Installer{
		Release: Current, Dir: t.TempDir(), Envtest: envtest, ReleaseURL: releaseURL,
		HTTP: httpClient(), Build: fb.build, Log: &log,
	}
	return in, fb, &log
}

func TestMirrorBinariesAreUsedNotBuilt(t *testing.T) {
	m := newMirror(t)
	mark := filepath.Join(t.TempDir(), "ran")
	want := map[string][]byte{}
	for _, n := range []string{KubeAPIServer, KubeControllerManager, Kubectl} {
		want[n] = append(standIn(Current.Kubernetes, mark), "# "+n+"\n"...)
		m.publish(Current.Kubernetes, n, want[n], "")
	}
	in, fb, log := testInstaller(t, m.URL)
	dir, err := in.Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]string{{Etcd}}, fb.asked()); diff != "" {
		t.Errorf("builds (-want +got):\n%s", diff)
	}
	for n, b := range want {
		got, err := os.ReadFile(Path(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s is not the mirror's", n)
		}
	}
	sources, err := Sources(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantSources := map[string]string{Etcd: SourceBuild, KubeAPIServer: SourceRelease, KubeControllerManager: SourceRelease, Kubectl: SourceRelease}
	if diff := cmp.Diff(wantSources, sources); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
	for _, n := range Names() {
		if !strings.Contains(log.String(), "kubebin: "+n+" "+Current.Kubernetes+": "+wantSources[n]) {
			t.Errorf("the log does not say where %s came from:\n%s", n, log)
		}
	}

	// Current now: no request, no build.
	asked := m.requests()
	if _, err := in.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := m.requests(); got != asked {
		t.Errorf("a second Ensure made %d requests", got-asked)
	}
	if got := len(fb.asked()); got != 1 {
		t.Errorf("a second Ensure built again (%d builds)", got)
	}
	// A binary changed by hand is not current: fetched again.
	if err := os.WriteFile(Path(dir, KubeAPIServer), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(Path(dir, KubeAPIServer)); !bytes.Equal(got, want[KubeAPIServer]) {
		t.Error("a kube-apiserver changed by hand was kept")
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("a binary was run")
	}
}

func TestMismatchedDigestIsRefused(t *testing.T) {
	m := newMirror(t)
	mark := filepath.Join(t.TempDir(), "ran")
	for _, n := range []string{KubeAPIServer, KubeControllerManager, Kubectl} {
		m.publish(Current.Kubernetes, n, standIn(Current.Kubernetes, mark), "")
	}
	// A tampered kube-controller-manager: the published digest is of
	// other bytes.
	other := sha256.Sum256([]byte("the real binary"))
	m.publish(Current.Kubernetes, KubeControllerManager, standIn(Current.Kubernetes, mark), hex.EncodeToString(other[:]))

	in, fb, _ := testInstaller(t, m.URL)
	_, err := in.Ensure(t.Context())
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("Ensure: %v, want %v", err, ErrChecksum)
	}
	for _, s := range []string{KubeControllerManager, hex.EncodeToString(other[:]), EnvReleaseURL + "=" + ReleaseURLOff} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not name %q: %v", s, err)
		}
	}
	if _, err := os.Stat(Path(in.Dir, KubeControllerManager)); err == nil {
		t.Error("the mismatched binary was written under its name")
	}
	if got := fb.asked(); len(got) != 0 {
		t.Errorf("built %v after a mismatch; want a failure", got)
	}
	left, err := filepath.Glob(filepath.Join(in.Dir, ".*download*"))
	if err != nil || len(left) != 0 {
		t.Errorf("downloads left behind: %v %v", left, err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("a binary was run")
	}
	if _, err := Sources(in.Dir); err != nil {
		t.Fatal(err)
	}
	if in.manifestCurrent() {
		t.Error("a failed install counts as current")
	}
}

// An unreachable release site (here a loopback port nothing listens on)
// falls back to the build at once.
func TestUnreachableReleaseSiteFallsBackToBuild(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	in, fb, log := testInstaller(t, "http://"+addr)
	start := time.Now()
	dir, err := in.Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > dialTimeout {
		t.Errorf("the fallback took %s", took)
	}
	if diff := cmp.Diff([][]string{Names()}, fb.asked()); diff != "" {
		t.Errorf("builds (-want +got):\n%s", diff)
	}
	if dir != fb.dir {
		t.Errorf("Ensure returned %s, want the build's directory %s", dir, fb.dir)
	}
	if !strings.Contains(log.String(), "no download of the release binaries") {
		t.Errorf("the log does not say the download failed:\n%s", log)
	}
}

// A release site that does not have the version (404) or answers with
// something that is not a digest (a captive portal's page) is no source.
func TestMissingOrUnverifiableFilesAreNotUsed(t *testing.T) {
	for name, publish := range map[string]func(m *mirror){
		"not published": func(*mirror) {},
		"no digest": func(m *mirror) {
			m.publish(Current.Kubernetes, KubeAPIServer, []byte("x"), "<html>sign in to the network</html>")
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := newMirror(t)
			publish(m)
			in, fb, _ := testInstaller(t, m.URL)
			if _, err := in.Ensure(t.Context()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([][]string{Names()}, fb.asked()); diff != "" {
				t.Errorf("builds (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(Path(in.Dir, KubeAPIServer)); err == nil {
				t.Error("an unverified kube-apiserver was written")
			}
		})
	}
}

// envtest's assets are used for what they hold, when of this exact
// version; kube-controller-manager, which envtest does not ship, comes
// from the next source.
func TestEnvtestAssetsAreUsedForWhatTheyHold(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "ran")
	stale, current := t.TempDir(), t.TempDir()
	for _, n := range []string{KubeAPIServer, Kubectl, Etcd} {
		if err := os.WriteFile(Path(stale, n), standIn("v1.36.1", mark), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(Path(current, n), standIn(Current.Kubernetes, mark), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := newMirror(t)
	kcm := standIn(Current.Kubernetes, mark)
	m.publish(Current.Kubernetes, KubeControllerManager, kcm, "")

	in, fb, _ := testInstaller(t, m.URL, stale, current)
	dir, err := in.Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sources, err := Sources(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{Etcd: SourceBuild, KubeAPIServer: SourceEnvtest, KubeControllerManager: SourceRelease, Kubectl: SourceEnvtest}
	if diff := cmp.Diff(want, sources); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{Etcd}}, fb.asked()); diff != "" {
		t.Errorf("builds (-want +got):\n%s", diff)
	}
	got, err := os.ReadFile(Path(dir, KubeAPIServer))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, standIn(Current.Kubernetes, mark)) {
		t.Error("kube-apiserver is not the current envtest directory's")
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("a binary was run other than for its version")
	}
}

func TestReleaseURLIsChecked(t *testing.T) {
	for v, want := range map[string]string{
		"": DefaultReleaseURL, "off": "", "http://127.0.0.1:8080/k8s/": "http://127.0.0.1:8080/k8s",
	} {
		got, err := releaseURL(v)
		if err != nil || got != want {
			t.Errorf("releaseURL(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
	for _, v := range []string{"dl.k8s.io", "ftp://mirror/", "no"} {
		if _, err := releaseURL(v); err == nil {
			t.Errorf("releaseURL(%q): no error", v)
		}
	}
	t.Setenv(EnvReleaseURL, "mirror.example")
	if _, err := NewInstaller(Current, t.TempDir(), nil); err == nil {
		t.Errorf("NewInstaller with %s=mirror.example: no error", EnvReleaseURL)
	}
}

// The envtest directories looked in: kubebuilder's variable first, then
// where setup-envtest installs this very version by default.
func TestEnvtestDirs(t *testing.T) {
	assets, data := t.TempDir(), t.TempDir()
	t.Setenv(EnvEnvtest, assets)
	t.Setenv("XDG_DATA_HOME", data)
	want := []string{assets, filepath.Join(data, "kubebuilder-envtest", "k8s", "1.33.13-"+runtime.GOOS+"-"+runtime.GOARCH)}
	if diff := cmp.Diff(want, envtestDirs(Oldest)); diff != "" {
		t.Errorf("envtestDirs (-want +got):\n%s", diff)
	}
}
