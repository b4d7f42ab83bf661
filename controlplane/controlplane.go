package controlplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/internal/freeport"
	"github.com/finale-dev/finale/internal/kubebin"
	"github.com/finale-dev/finale/internal/procgroup"
)

// AdminUser is the identity the returned rest.Config authenticates as; it is
// in system:masters.
const AdminUser = "finale-admin"

const (
	readyTimeout = 90 * time.Second
	// stopGrace is short on purpose: the state is thrown away, and
	// kube-apiserver's graceful shutdown alone takes about 4 s, which every
	// test that runs its own control plane would pay.
	stopGrace    = time.Second
	logTailLines = 30
)

// Options tune Start. The zero value is ready to use.
type Options struct {
	// Log receives progress (a cold binary build takes minutes). Nil
	// discards it.
	Log io.Writer
	// BinDir is where the Kubernetes binaries are built and cached; empty
	// means $FINALE_KUBE_BIN_DIR, else <user cache dir>/finale/kube-<versions>.
	// What is there is used only when its stamp matches this version's
	// build, and rebuilt otherwise (see Binaries).
	BinDir string
	// KubernetesVersion chooses the Kubernetes release the control plane
	// runs: empty means $FINALE_KUBE_VERSION, else the current one
	// (v1.37.2); v1.33 (v1.33.13) is the oldest finale supports. The
	// releases are those of SupportedVersions.
	KubernetesVersion string
	// APIServerFlags are appended to kube-apiserver's flags.
	APIServerFlags []string
	// ControllerManagerFlags are appended to kube-controller-manager's
	// flags (--feature-gates=..., say).
	ControllerManagerFlags []string
	// CRDs are installed, and established, before kube-controller-manager
	// starts, so that its garbage collector watches their kinds from its
	// start (see the package documentation).
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// APIServers is how many kube-apiservers run on the one etcd; zero
	// means one. Every one after the first reaches etcd through its own
	// EtcdLink (see APIServer), so that its watch cache can be made to lag
	// or be partitioned; ControlPlane.AddAPIServer adds more later.
	APIServers int
}

// ControlPlane is a running local control plane.
type ControlPlane struct {
	// Config authenticates as AdminUser.
	Config *rest.Config
	// Kubeconfig is a file holding Config, for kubectl and other processes.
	Kubeconfig string
	// BinDir holds the binaries, kubectl among them.
	BinDir string
	// KubernetesVersion is the version of the binaries (v1.37.2).
	KubernetesVersion string
	// Started holds how long each component took from start to ready.
	Started map[string]time.Duration

	dir string

	mu      sync.Mutex // guards procs, stopped and more
	procs   []*process
	stopped bool
	more    *extra // apiservers after the first, and fronts (apiservers.go)
}

type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when cmd.Wait returns
	err  error         // set before done is closed
}

// Start brings up etcd, kube-apiserver and kube-controller-manager and waits
// until each is ready. On failure it stops what it started and returns the
// tail of the failing process's log.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	rel, err := release(opts.KubernetesVersion)
	if err != nil {
		return nil, err
	}
	binDir, err := rel.Ensure(ctx, opts.BinDir, opts.Log)
	if err != nil {
		return nil, err
	}
	var cp *ControlPlane
	err = freeport.Retry(opts.Log, pickPorts, 4, func(ports []int) (err error) {
		cp, err = start(ctx, opts, rel, binDir, ports)
		return err
	})
	return cp, err
}

// start is one attempt of Start, on ports (etcd's client and peer ports,
// the apiserver's and the controller manager's).
func start(ctx context.Context, opts Options, rel kubebin.Release, binDir string, ports []int) (_ *ControlPlane, err error) {
	dir, err := os.MkdirTemp("", "finale-controlplane-")
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	cp := &ControlPlane{BinDir: binDir, KubernetesVersion: rel.Kubernetes, dir: dir, Started: map[string]time.Duration{}}
	defer func() {
		if err != nil {
			_ = cp.Stop()
		}
	}()

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	apiPort, kcmPort := ports[2], ports[3]

	t0 := time.Now()
	etcd, err := cp.spawn(ctx, kubebin.Etcd,
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-url="+etcdURL,
		"--listen-peer-url=http://127.0.0.1:"+strconv.Itoa(ports[1]),
	)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, etcd, etcdURL+"/health", nil); err != nil {
		return nil, err
	}
	cp.Started[kubebin.Etcd] = time.Since(t0)

	token, err := randomToken()
	if err != nil {
		return nil, err
	}
	if err := writeSecrets(dir, token); err != nil {
		return nil, err
	}
	t0 = time.Now()
	apiArgs := append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://finale.local",
		"--service-account-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
	}, opts.APIServerFlags...)
	api, err := cp.spawn(ctx, kubebin.KubeAPIServer, apiArgs...)
	if err != nil {
		return nil, err
	}
	host := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	if err := waitHTTP(ctx, api, host+"/readyz", &token); err != nil {
		return nil, err
	}
	cp.Started[kubebin.KubeAPIServer] = time.Since(t0)

	cp.Config = &rest.Config{
		Host:            host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "apiserver-certs", "apiserver.crt")},
		QPS:             -1, // no client-side throttling on a private control plane
	}
	cp.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(cp.Kubeconfig, cp.Config); err != nil {
		return nil, err
	}
	if err := cp.installCRDs(ctx, opts.CRDs); err != nil {
		return nil, err
	}

	t0 = time.Now()
	kcm, err := cp.spawn(ctx, kubebin.KubeControllerManager, append([]string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--authentication-kubeconfig=" + cp.Kubeconfig,
		"--authorization-kubeconfig=" + cp.Kubeconfig,
		"--controllers=namespace-controller,garbage-collector-controller",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(kcmPort),
		"--cert-dir=" + filepath.Join(dir, "kcm-certs"),
	}, opts.ControllerManagerFlags...)...)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, kcm, "https://127.0.0.1:"+strconv.Itoa(kcmPort)+"/healthz", &token); err != nil {
		return nil, err
	}
	cp.Started[kubebin.KubeControllerManager] = time.Since(t0)
	if err := cp.startMore(ctx, opts); err != nil {
		return nil, err
	}
	return cp, nil
}

// installCRDs installs crds through the admin's credentials.
func (cp *ControlPlane) installCRDs(ctx context.Context, crds []*apiextensionsv1.CustomResourceDefinition) error {
	if len(crds) == 0 {
		return nil
	}
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("controlplane: a client to install CRDs: %w", err)
	}
	if err := InstallCRDs(ctx, c, crds...); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	return nil
}

// EnvBinDir names the environment variable that moves the binary cache
// (Options.BinDir's default) of the current Kubernetes release.
const EnvBinDir = kubebin.EnvDir

// EnvKubernetesVersion names the environment variable that chooses the
// Kubernetes release when Options.KubernetesVersion is empty: make test's
// kube133 job runs real-stack tests on v1.33 with it.
const EnvKubernetesVersion = "FINALE_KUBE_VERSION"

// SupportedVersions returns the Kubernetes releases the control plane runs,
// the default first: the newest and the oldest server finale supports.
func SupportedVersions() []string {
	var out []string
	for _, r := range kubebin.Releases() {
		out = append(out, r.Kubernetes)
	}
	return out
}

func release(v string) (kubebin.Release, error) {
	if v == "" {
		v = os.Getenv(EnvKubernetesVersion)
	}
	r, err := kubebin.Lookup(v)
	if err != nil {
		return kubebin.Release{}, fmt.Errorf("controlplane: %w", err)
	}
	return r, nil
}

// Binaries returns the directory holding the Kubernetes binaries this
// version of finale runs by default (dir, or the default of Options.BinDir
// when dir is empty), putting them there first when they are missing or
// carry another build's stamp: from an envtest asset directory of the same
// version, the official release (SHA-256 verified), else a build that
// needs only the Go toolchain and the module proxy and takes minutes, once
// (see internal/kubebin). Progress, and each binary's source, goes to log
// (nil discards it).
// `go run github.com/finale-dev/finale/controlplane/kubeinstall@<version>`
// does the same beforehand.
func Binaries(ctx context.Context, dir string, log io.Writer) (string, error) {
	return kubebin.Ensure(ctx, dir, log)
}

// Dir is the control plane's temporary directory (logs, certificates, data).
func (cp *ControlPlane) Dir() string { return cp.dir }

// PIDs returns the process IDs of the running components, by name.
func (cp *ControlPlane) PIDs() map[string]int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make(map[string]int, len(cp.procs))
	for _, p := range cp.procs {
		out[p.name] = p.cmd.Process.Pid
	}
	return out
}

// LogTail returns the last lines of a component's log.
func (cp *ControlPlane) LogTail(name string, lines int) string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, p := range cp.procs {
		if p.name == name {
			return readTail(p.log, lines)
		}
	}
	return ""
}

// ServerVersion asks the apiserver for its version.
func (cp *ControlPlane) ServerVersion() (*version.Info, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	return dc.ServerVersion()
}

// Stop ends every component (SIGTERM, then SIGKILL to the process group after
// a grace period) and removes the temporary directory. It is safe to call more
// than once and on a partly started control plane.
func (cp *ControlPlane) Stop() error {
	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		return nil
	}
	cp.stopped = true
	procs := cp.procs
	cp.mu.Unlock()

	var errs []error
	// Reverse order: the controller manager first, etcd last, so nothing
	// logs a storm of connection errors on the way down.
	for i := len(procs) - 1; i >= 0; i-- {
		procgroup.Stop(procs[i].cmd.Process.Pid, procs[i].done, stopGrace)
	}
	if err := cp.closeMore(); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(cp.dir); err != nil {
		errs = append(errs, fmt.Errorf("controlplane: remove %s: %w", cp.dir, err))
	}
	return errors.Join(errs...)
}

func (cp *ControlPlane) spawn(ctx context.Context, name string, args ...string) (*process, error) {
	return cp.spawnAs(ctx, name, name, args...)
}

// spawnAs runs binary bin under another name (its log's and process's),
// for a second instance of one component.
func (cp *ControlPlane) spawnAs(ctx context.Context, name, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(cp.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	cmd := exec.Command(kubebin.Path(cp.BinDir, bin), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = cp.dir
	// Own process group, so Stop can signal everything the component
	// started; a parent-death signal, so a panicking test leaves nothing.
	cmd.SysProcAttr = procgroup.Attr()
	if err := cmd.Start(); err != nil {
		_ = f.Close() // the process never started; nothing was written
		return nil, fmt.Errorf("controlplane: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = procgroup.Wait(cmd)
		_ = f.Close() // the log is complete once the process exits
		close(p.done)
	}()
	cp.mu.Lock()
	cp.procs = append(cp.procs, p)
	cp.mu.Unlock()
	_ = ctx
	return p, nil
}

// waitHTTP polls url until it answers 200, the process exits, or the
// deadline passes; the error carries the process's log tail.
func waitHTTP(ctx context.Context, p *process, url string, token *string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: insecureTLS()},
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != nil {
			req.Header.Set("Authorization", "Bearer "+*token)
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			tail := readTail(p.log, logTailLines)
			if freeport.Taken(tail) {
				return fmt.Errorf("controlplane: %s exited before it was ready (%w: %w); last lines of %s:\n%s", p.name, freeport.ErrTaken, p.err, p.log, tail)
			}
			return fmt.Errorf("controlplane: %s exited before it was ready (%w); last lines of %s:\n%s", p.name, p.err, p.log, tail)
		case <-ctx.Done():
			return fmt.Errorf("controlplane: %s not ready at %s: %w; last lines of %s:\n%s", p.name, url, ctx.Err(), p.log, readTail(p.log, logTailLines))
		case <-tick.C:
		}
	}
}

// pickPorts is freeport.Ports; a test makes it hand out a taken port.
var pickPorts = freeport.Ports

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("controlplane: %w", err)
	}
	return fmt.Sprintf("%x", b), nil
}

func writeSecrets(dir, token string) error {
	tokens := fmt.Sprintf("%s,%s,%s-uid,\"system:masters\"\n", token, AdminUser, AdminUser)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("controlplane: service-account key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("controlplane: service-account key: %w", err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pemBytes, 0o600); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	return nil
}

func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["finale"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos["finale-admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["finale"] = &clientcmdapi.Context{Cluster: "finale", AuthInfo: "finale-admin", Namespace: "default"}
	kc.CurrentContext = "finale"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("controlplane: kubeconfig: %w", err)
	}
	return nil
}

func readTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	parts := strings.Split(string(bytes.TrimRight(b, "\n")), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
