package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/cmd/operator/app"
	"github.com/finale-dev/finale/internal/kubebin"
	"github.com/finale-dev/finale/ledger"
)

// The manifests' fixed names (config/default).
const (
	manifestNamespace = "finale-system"
	manifestSA        = "finale-postgres-operator"
)

var (
	renderOnce sync.Once
	rendered   []*unstructured.Unstructured
	renderErr  error
)

// render returns config/default as kubectl kustomize renders it (kubectl is
// the one internal/kubebin builds from Go modules, the same that the
// control plane's binaries come from).
func render(t testing.TB) []*unstructured.Unstructured {
	t.Helper()
	renderOnce.Do(func() {
		dir, err := kubebin.Ensure(context.Background(), "", os.Stderr)
		if err != nil {
			renderErr = err
			return
		}
		var out, stderr bytes.Buffer
		cmd := exec.Command(kubebin.Path(dir, kubebin.Kubectl), "kustomize", filepath.Join("..", "..", "config", "default"))
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			renderErr = errors.New("kubectl kustomize: " + err.Error() + ": " + stderr.String())
			return
		}
		for doc := range strings.SplitSeq(out.String(), "\n---\n") {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				renderErr = err
				return
			}
			if len(u.Object) > 0 {
				rendered = append(rendered, u)
			}
		}
	})
	if renderErr != nil {
		t.Fatal(renderErr)
	}
	return rendered
}

var (
	applyOnce sync.Once
	applyErr  error // every caller's, not only the first's
)

// applyManifests creates everything config/default renders, as rendered
// (namespace finale-system, the real names), except the Deployment: the
// tests run the operator as a process, with the Deployment's ServiceAccount
// by impersonation (impersonating).
func applyManifests(t testing.TB, c client.Client) {
	t.Helper()
	rendered := render(t)
	applyOnce.Do(func() {
		for _, u := range rendered {
			if u.GetKind() == "Deployment" {
				continue
			}
			if e := c.Create(context.Background(), u.DeepCopy()); e != nil && !apierrors.IsAlreadyExists(e) {
				applyErr = errors.Join(applyErr, e)
			}
		}
	})
	if applyErr != nil {
		t.Fatal(applyErr)
	}
}

// impersonating writes a kubeconfig that acts as ServiceAccount ns/name
// (with the groups a real token carries), so that a process given it runs
// with exactly that ServiceAccount's RBAC.
func impersonating(t testing.TB, cp *controlplane.ControlPlane, ns, name string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cp"] = &clientcmdapi.Cluster{Server: cp.Config.Host, CertificateAuthority: cp.Config.CAFile}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{
		Token:             cp.Config.BearerToken,
		Impersonate:       "system:serviceaccount:" + ns + ":" + name,
		ImpersonateGroups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "cp", AuthInfo: "sa"}
	cfg.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// operatorProcess runs this test binary as the operator (see TestMain) with
// args and env; its log goes to a file shown when the test fails. stop
// ends it (once); cleanup stops it too.
type operatorProcess struct {
	cmd  *exec.Cmd
	stop func()
}

func startOperator(t testing.TB, kubeconfig, recordsNS string, env []string, args ...string) *operatorProcess {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--", "--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = append(append(os.Environ(), asOperator+"=1", ledger.NamespaceEnv+"="+recordsNS), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	p := &operatorProcess{cmd: cmd}
	p.stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			_ = logFile.Close()
		})
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("operator log:\n%s", tail(string(b), 60))
			}
		}
	})
	return p
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// runCachingSecrets is the operator as it ran before Secrets were metadata only, for the
// memory benchmark's baseline: the same flags and controllers, but no cache
// or client options and a typed informer of every Secret in the cluster,
// which is what the hold's full Secret watch and the cached Secret reads
// made.
func runCachingSecrets(args []string) error {
	s, err := app.Parse(args)
	if err != nil {
		return err
	}
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	ctrl.SetLogger(log)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	opts, err := s.ManagerOptions(log)
	if err != nil {
		return err
	}
	opts.Cache = cache.Options{}
	opts.Client = client.Options{}
	mgr, err := s.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	// Registered before Start: the manager starts it with the cache and
	// waits for it to sync before any controller runs.
	if _, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Secret{}, cache.BlockUntilSynced(false)); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
