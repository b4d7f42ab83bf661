package controlplane_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/kubebin"
)

// TestReleaseBinariesRunAControlPlane: binaries taken from a release site
// (a mirror on loopback serving, as dl.k8s.io does, the real binaries this
// machine already has, each with its .sha256) and an etcd built beside
// them make a control plane that runs, with no Kubernetes build.
func TestReleaseBinariesRunAControlPlane(t *testing.T) {
	ctx := t.Context()
	have, err := controlplane.Binaries(ctx, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "/release/" + kubebin.Current.Kubernetes + "/bin/" + runtime.GOOS + "/" + runtime.GOARCH + "/"
	var mu sync.Mutex // guards served
	served := map[string]bool{}
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := strings.CutPrefix(r.URL.Path, prefix)
		if !ok || name == kubebin.Etcd || strings.HasPrefix(name, kubebin.Etcd+".") {
			http.NotFound(w, r)
			return
		}
		bin, digest := strings.CutSuffix(name, ".sha256")
		b, err := os.ReadFile(kubebin.Path(have, bin))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		if digest {
			s := sha256.Sum256(b)
			_, _ = io.WriteString(w, hex.EncodeToString(s[:])+"\n")
			return
		}
		mu.Lock()
		served[bin] = true
		mu.Unlock()
		_, _ = w.Write(b)
	}))
	t.Cleanup(mirror.Close)

	var log strings.Builder
	in, err := kubebin.NewInstaller(kubebin.Current, t.TempDir(), &log)
	if err != nil {
		t.Fatal(err)
	}
	in.ReleaseURL, in.Envtest = mirror.URL, nil
	dir, err := in.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kubebin.Sources(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		kubebin.Etcd: kubebin.SourceBuild, kubebin.KubeAPIServer: kubebin.SourceRelease,
		kubebin.KubeControllerManager: kubebin.SourceRelease, kubebin.Kubectl: kubebin.SourceRelease,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("sources (-want +got):\n%s\n%s", diff, log.String())
	}
	mu.Lock()
	if len(served) != 3 {
		t.Errorf("the mirror served %v", served)
	}
	mu.Unlock()
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	v, err := cp.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != kubebin.Current.Kubernetes {
		t.Errorf("server version %s, want %s", v.GitVersion, kubebin.Current.Kubernetes)
	}
}
