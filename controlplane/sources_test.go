package controlplane_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
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
	// The digests are computed before the mirror serves: hashing a binary
	// of 100 MB per request on a loaded machine outlasted the installer's
	// wait for an answer.
	digests := map[string]string{}
	for _, bin := range []string{kubebin.KubeAPIServer, kubebin.KubeControllerManager, kubebin.Kubectl} {
		f, err := os.Open(kubebin.Path(have, bin))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		digests[bin] = hex.EncodeToString(h.Sum(nil))
	}
	var mu sync.Mutex // guards served
	served := map[string]bool{}
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, _ := strings.CutPrefix(r.URL.Path, prefix)
		bin, digest := strings.CutSuffix(name, ".sha256")
		sum, ok := digests[bin]
		switch {
		case !strings.HasPrefix(r.URL.Path, prefix) || !ok:
			http.NotFound(w, r)
		case digest:
			_, _ = io.WriteString(w, sum+"\n")
		default:
			mu.Lock()
			served[bin] = true
			mu.Unlock()
			http.ServeFile(w, r, kubebin.Path(have, bin))
		}
	}))
	t.Cleanup(mirror.Close)

	var log strings.Builder
	in, err := kubebin.NewInstaller(kubebin.Current, t.TempDir(), &log)
	if err != nil {
		t.Fatal(err)
	}
	in.ReleaseURL, in.Envtest = mirror.URL, nil
	// Only etcd is built (seconds); a failed download must fail the test,
	// not fall back to a build of Kubernetes that takes minutes.
	build := in.Build
	in.Build = func(ctx context.Context, names []string, log io.Writer) (string, error) {
		if slices.ContainsFunc(names, func(n string) bool { return n != kubebin.Etcd }) {
			return "", fmt.Errorf("the mirror's binaries were not taken: asked to build %q", names)
		}
		return build(ctx, names, log)
	}
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
	// The mirror served the current release: say so, or the kube133 job's
	// $FINALE_KUBE_VERSION would have Start put v1.33 in its place.
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: dir, KubernetesVersion: kubebin.Current.Kubernetes})
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
