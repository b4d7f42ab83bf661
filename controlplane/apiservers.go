package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/internal/freeport"
	"github.com/finale-dev/finale/internal/kubebin"
	"github.com/finale-dev/finale/internal/procgroup"
)

// APIServer is one kube-apiserver of a control plane. All of them share
// the control plane's etcd; every one but the first reaches it through
// EtcdLink, a proxy that can make what etcd sends it arrive late (its
// watch cache, and so every cached list and watch it serves, lags by that
// much) or cut it off (a partition). The stale views it then serves are
// the apiserver's own, not a client wrapper's.
type APIServer struct {
	// Config reaches this apiserver as AdminUser; all apiservers serve the
	// first one's certificate, so one CA file trusts them all.
	Config *rest.Config
	// EtcdLink carries this apiserver's etcd traffic; nil for the first,
	// which talks to etcd directly.
	EtcdLink *faultinject.LagProxy

	cp   *ControlPlane
	name string
	args []string

	mu   sync.Mutex // guards proc
	proc *process
}

// extra is what a control plane with more than one apiserver keeps.
type extra struct {
	mu      sync.Mutex // guards servers and closers
	servers []*APIServer
	closers []func() error
}

// Addr is the apiserver's host:port.
func (a *APIServer) Addr() string {
	u, err := url.Parse(a.Config.Host)
	if err != nil {
		return ""
	}
	return u.Host
}

// Name names the apiserver's process and log (kube-apiserver,
// kube-apiserver-2, ...).
func (a *APIServer) Name() string { return a.name }

// APIServers returns the control plane's apiservers, the first being the
// one Config reaches.
func (cp *ControlPlane) APIServers() []*APIServer {
	first := &APIServer{cp: cp, name: kubebin.KubeAPIServer, Config: rest.CopyConfig(cp.Config)}
	cp.mu.Lock()
	for _, p := range cp.procs {
		if p.name == kubebin.KubeAPIServer {
			first.proc = p
			break
		}
	}
	x := cp.more
	cp.mu.Unlock()
	out := []*APIServer{first}
	if x != nil {
		x.mu.Lock()
		out = append(out, x.servers...)
		x.mu.Unlock()
	}
	return out
}

// ErrNotStarted means the control plane has no first apiserver to copy.
var ErrNotStarted = errors.New("controlplane: no running kube-apiserver to add another to")

// AddAPIServer starts one more kube-apiserver on the control plane's etcd,
// its etcd traffic through a new EtcdLink (no lag, not partitioned), and
// waits until it is ready. Stop ends it with the rest.
func (cp *ControlPlane) AddAPIServer(ctx context.Context) (*APIServer, error) {
	cp.mu.Lock()
	var first *process
	for _, p := range cp.procs {
		if p.name == kubebin.KubeAPIServer {
			first = p
			break
		}
	}
	if cp.more == nil {
		cp.more = &extra{}
	}
	x := cp.more
	stopped := cp.stopped
	cp.mu.Unlock()
	if first == nil || stopped || cp.Config == nil {
		return nil, ErrNotStarted
	}
	var etcdURL string
	for _, a := range first.cmd.Args[1:] {
		if v, ok := strings.CutPrefix(a, "--etcd-servers="); ok {
			etcdURL = v
		}
	}
	u, err := url.Parse(etcdURL)
	if err != nil {
		return nil, fmt.Errorf("controlplane: the first apiserver's etcd URL %q: %w", etcdURL, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("controlplane: the first apiserver's etcd URL %q has no host", etcdURL)
	}
	link, err := faultinject.NewLagProxy(u.Host)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	n := len(x.servers) + 2
	x.closers = append(x.closers, link.Close)
	x.mu.Unlock()
	name := kubebin.KubeAPIServer + "-" + strconv.Itoa(n)
	certs := filepath.Join(cp.dir, "apiserver-certs")
	// A port taken between the pick and the bind (by a parallel test's
	// connection, say) costs another attempt on a fresh one.
	var a *APIServer
	err = freeport.Retry(nil, pickPorts, 1, func(ports []int) error {
		args := []string{}
		for _, arg := range first.cmd.Args[1:] {
			switch {
			case strings.HasPrefix(arg, "--etcd-servers="), strings.HasPrefix(arg, "--secure-port="), strings.HasPrefix(arg, "--cert-dir="):
				continue
			}
			args = append(args, arg)
		}
		args = append(args,
			"--etcd-servers=http://"+link.Addr(),
			"--secure-port="+strconv.Itoa(ports[0]),
			"--cert-dir="+filepath.Join(cp.dir, name+"-certs"),
			"--tls-cert-file="+filepath.Join(certs, "apiserver.crt"),
			"--tls-private-key-file="+filepath.Join(certs, "apiserver.key"),
			// Its etcd may be seconds behind on purpose: health checks that
			// give up after the default 2 s would only add noise.
			"--etcd-healthcheck-timeout=30s",
			"--etcd-readycheck-timeout=30s",
		)
		cfg := rest.CopyConfig(cp.Config)
		cfg.Host = "https://127.0.0.1:" + strconv.Itoa(ports[0])
		a = &APIServer{cp: cp, name: name, args: args, Config: cfg, EtcdLink: link}
		return a.start(ctx)
	})
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	x.servers = append(x.servers, a)
	x.mu.Unlock()
	return a, nil
}

func (a *APIServer) start(ctx context.Context) error {
	t0 := time.Now()
	p, err := a.cp.spawnAs(ctx, a.name, kubebin.KubeAPIServer, a.args...)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.proc = p
	a.mu.Unlock()
	token := a.cp.Config.BearerToken
	if err := waitHTTP(ctx, p, a.Config.Host+"/readyz", &token); err != nil {
		return err
	}
	a.cp.mu.Lock()
	a.cp.Started[a.name] = time.Since(t0)
	a.cp.mu.Unlock()
	return nil
}

// ErrFirst means the operation does not apply to the first apiserver,
// which the control plane's own components use.
var ErrFirst = errors.New("controlplane: the first kube-apiserver cannot be killed or restarted (the controller manager uses it)")

// Kill ends the apiserver at once (SIGKILL), as a crashed or lost node, and
// waits until it has exited. Restart starts it again.
func (a *APIServer) Kill() error {
	if a.EtcdLink == nil {
		return ErrFirst
	}
	a.mu.Lock()
	p := a.proc
	a.mu.Unlock()
	if p == nil {
		return nil
	}
	procgroup.Kill(p.cmd.Process.Pid, p.done)
	<-p.done
	return nil
}

// Restart starts a killed apiserver again, on the same port and etcd link,
// and waits until it is ready.
func (a *APIServer) Restart(ctx context.Context) error {
	if a.EtcdLink == nil {
		return ErrFirst
	}
	a.mu.Lock()
	p := a.proc
	a.mu.Unlock()
	if p != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("controlplane: %s is running; Kill it first", a.name)
		}
	}
	return a.start(ctx)
}

// Front is what a client reaches instead of one apiserver: a TCP front
// (a load balancer) that sends every new connection to the apiserver it
// routes to, and on Route resets the established ones, so clients fail
// over to the new one the way they do behind a real load balancer.
type Front struct {
	// Config reaches the front as AdminUser.
	Config *rest.Config
	proxy  *faultinject.LagProxy

	mu sync.Mutex // guards to
	to *APIServer
}

// NewFront returns a front routing to a; Close (or the control plane's
// Stop) closes it.
func (cp *ControlPlane) NewFront(a *APIServer) (*Front, error) {
	p, err := faultinject.NewLagProxy(a.Addr())
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	if cp.more == nil {
		cp.more = &extra{}
	}
	x := cp.more
	cp.mu.Unlock()
	x.mu.Lock()
	x.closers = append(x.closers, p.Close)
	x.mu.Unlock()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Host = "https://" + p.Addr()
	return &Front{Config: cfg, proxy: p, to: a}, nil
}

// To is the apiserver the front routes to.
func (f *Front) To() *APIServer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.to
}

// Route sends new connections to a and resets the established ones;
// it returns how many it reset.
func (f *Front) Route(a *APIServer) (int, error) {
	f.mu.Lock()
	f.to = a
	f.mu.Unlock()
	return f.proxy.Retarget(a.Addr())
}

// Addr is the front's host:port.
func (f *Front) Addr() string { return f.proxy.Addr() }

// Close closes the front and its connections.
func (f *Front) Close() error { return f.proxy.Close() }

// startMore starts the extra apiservers Options.APIServers asks for.
func (cp *ControlPlane) startMore(ctx context.Context, opts Options) error {
	for range opts.APIServers - 1 {
		if _, err := cp.AddAPIServer(ctx); err != nil {
			return err
		}
	}
	return nil
}

// closeMore closes the extra apiservers' links and the fronts; the
// processes go with the control plane's others.
func (cp *ControlPlane) closeMore() error {
	cp.mu.Lock()
	x := cp.more
	cp.mu.Unlock()
	if x == nil {
		return nil
	}
	x.mu.Lock()
	closers := x.closers
	x.closers = nil
	x.mu.Unlock()
	var errs []error
	for _, c := range closers {
		if err := c(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
