package kubebin

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/finale-dev/finale/internal/binbuild"
)

// Pinned versions. Changing tools/kube changes the stamp and forces a rebuild;
// changing these constants changes the cache directory as well.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.0"
)

// Binary names, as found in the directory Ensure returns.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	Kubectl               = "kubectl"
)

// EnvDir names the environment variable that overrides the cache directory.
const EnvDir = "FINALE_KUBE_BIN_DIR"

const (
	moduleDir  = "tools/kube"
	modulePath = "github.com/finale-dev/finale/tools/kube"
)

// targets are built in this order: the quick one first, so a broken toolchain
// shows up in seconds rather than after the apiserver's five minutes.
var targets = []binbuild.Target{
	{Name: Etcd, Package: "./cmd/etcd"},
	{Name: Kubectl, Package: "k8s.io/kubernetes/cmd/kubectl"},
	{Name: KubeControllerManager, Package: "k8s.io/kubernetes/cmd/kube-controller-manager"},
	{Name: KubeAPIServer, Package: "k8s.io/kubernetes/cmd/kube-apiserver"},
}

// Dir returns the directory that holds, or will hold, the binaries.
func Dir() (string, error) {
	return binbuild.CacheDir(EnvDir, "kube-"+KubernetesVersion+"-etcd-"+EtcdVersion)
}

// Path returns the full path of one binary in dir.
func Path(dir, name string) string { return binbuild.Path(dir, name) }

// spec is the build of the binaries from the tools/kube checkout.
func spec() (binbuild.Spec, error) {
	dir, err := Dir()
	if err != nil {
		return binbuild.Spec{}, err
	}
	src, err := binbuild.FindModule(moduleDir, modulePath)
	if err != nil {
		return binbuild.Spec{}, err
	}
	return binbuild.Spec{
		Prefix: "kubebin", What: "Kubernetes " + KubernetesVersion + " and etcd " + EtcdVersion,
		Dir: dir, Source: os.DirFS(src), Targets: targets, LDFlags: ldflags(),
		Cold: "about 8 minutes on 2 cores",
	}, nil
}

// Ensure returns the directory holding up-to-date binaries, building them
// first when they are missing or were built from a different tools/kube.
// Progress goes to log (nil discards it).
func Ensure(ctx context.Context, log io.Writer) (string, error) {
	s, err := spec()
	if err != nil {
		return "", fmt.Errorf("kubebin: %w", err)
	}
	return s.Ensure(ctx, log)
}

func ldflags() string {
	minor := strings.Split(strings.TrimPrefix(KubernetesVersion, "v"), ".")[1]
	var b strings.Builder
	b.WriteString("-s -w")
	for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		fmt.Fprintf(&b, " -X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean", p, KubernetesVersion, p, p, minor, p)
	}
	return b.String()
}
