package check

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/testenv"
)

// serviceReadyTimeout bounds the external service's start.
const serviceReadyTimeout = time.Minute

// stack is what every run of one check shares: the control plane with the
// operator's CRDs, the fault proxies, the external service, and what the
// first runs measured.
type stack struct {
	spec *Spec
	env  *testenv.Env
	c    client.Client
	meta metadata.Interface
	disc discovery.DiscoveryInterface
	tmp  string
	log  io.Writer

	proxies     map[string]*faultinject.Proxy
	serviceAddr string
	service     *proc
	// scopes are the world's cluster-scoped kinds, resolved once the
	// CRDs are installed.
	scopes scopes

	// lagging is the second apiserver of the stale-apiserver experiment,
	// added on first use; laggingKubeconfig reaches it.
	lagging           *controlplane.APIServer
	laggingKubeconfig string

	// win is what the first runs measured, shared by every lane.
	win *windows
}

// windows are how long the creates and a namespace deletion took in the
// first undisturbed runs: the kills fall at random moments within them.
type windows struct {
	mu             sync.Mutex // guards create and delete
	create, delete time.Duration
}

func newStack(ctx context.Context, spec *Spec, tmp string, log io.Writer) (_ *stack, err error) {
	st := &stack{spec: spec, tmp: tmp, log: log, proxies: map[string]*faultinject.Proxy{}, win: &windows{}}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	crds, errs := spec.crdPaths()
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrSpec, errors.Join(errs...))
	}
	progress(log, "starting the control plane (etcd, kube-apiserver, kube-controller-manager) and installing %d CRD path(s)", len(crds))
	if st.env, err = testenv.Start(ctx, testenv.Options{CRDPaths: crds, Log: log}); err != nil {
		return nil, err
	}
	st.c = st.env.Client
	quiet := rest.CopyConfig(st.env.Config)
	quiet.WarningHandler = rest.NoWarnings{} // listing every kind touches deprecated ones (v1 Endpoints)
	if st.meta, err = metadata.NewForConfig(quiet); err != nil {
		return nil, err
	}
	if st.disc, err = discovery.NewDiscoveryClientForConfig(quiet); err != nil {
		return nil, err
	}
	v := Values{TempDir: tmp, Dir: spec.dir, proxies: map[string]string{}}
	if spec.Service != nil {
		if st.serviceAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		v.ServiceAddr = st.serviceAddr
		if err := st.startService(ctx, v); err != nil {
			return nil, err
		}
	}
	for i, f := range spec.Faults {
		addr, err := expand(fmt.Sprintf("faults[%d].address", i), f.Address, v)
		if err != nil {
			return nil, err
		}
		var p *faultinject.Proxy
		if f.Protocol == ProtocolHTTP2 {
			p, err = faultinject.NewHTTP2Proxy(addr)
		} else {
			p, err = faultinject.NewProxy(addr)
		}
		if err != nil {
			return nil, fmt.Errorf("fault point %s: %w", f.Name, err)
		}
		st.proxies[f.Name] = p
	}
	return st, nil
}

// startService runs the external service and waits until its ready
// address accepts connections.
func (st *stack) startService(ctx context.Context, v Values) error {
	s := st.spec.Service
	argv, err := expandAll("service.command", s.Command, v)
	if err != nil {
		return err
	}
	argv[0] = st.spec.program(argv[0])
	env, err := expandEnv("service.env", s.Env, v)
	if err != nil {
		return err
	}
	ready, err := expand("service.ready", cmp.Or(s.Ready, "{{.ServiceAddr}}"), v)
	if err != nil {
		return err
	}
	progress(st.log, "starting the external service: %s", strings.Join(argv, " "))
	if st.service, err = startProc("service", argv, env, st.spec.path(s.Dir), filepath.Join(st.tmp, "service.log")); err != nil {
		return err
	}
	err = controlplane.WaitFor(ctx, serviceReadyTimeout, "the external service to accept connections on "+ready, func(context.Context) (bool, error) {
		if !st.service.running() {
			return false, fmt.Errorf("the service exited (%v); its log:\n%s", st.service.err, st.service.tail(20))
		}
		c, err := net.DialTimeout("tcp", ready, time.Second)
		if err != nil {
			return false, nil
		}
		_ = c.Close() // only reachability was asked
		return true, nil
	})
	return err
}

// values returns a run's template values.
func (st *stack) values(ns, opNS, run string, seed int64, kubeconfig, cacheKubeconfig string) Values {
	v := Values{
		Namespace: ns, OperatorNamespace: opNS, Run: run, Seed: seed,
		Kubeconfig: kubeconfig, CacheKubeconfig: cacheKubeconfig,
		ServiceAddr: st.serviceAddr, TempDir: st.tmp, Dir: st.spec.dir, proxies: map[string]string{},
	}
	for n, p := range st.proxies {
		v.proxies[n] = p.Addr()
	}
	return v
}

// heal undoes every proxy fault; stalled connections are reset, since a
// stall cannot be undone.
func (st *stack) heal() {
	for _, p := range st.proxies {
		p.Thaw()
		p.Refuse(false)
		p.SetLatency(0)
	}
	if st.lagging != nil {
		st.lagging.EtcdLink.SetLag(0)
	}
}

// resetAll aborts every proxied connection (the end of a run: a stalled
// connection cannot heal otherwise).
func (st *stack) resetAll() {
	for _, p := range st.proxies {
		p.ResetAll()
	}
}

// laggingAPIServer starts the second apiserver on first use and writes a
// kubeconfig reaching it.
func (st *stack) laggingAPIServer(ctx context.Context) (*controlplane.APIServer, string, error) {
	if st.lagging != nil {
		return st.lagging, st.laggingKubeconfig, nil
	}
	progress(st.log, "starting a second kube-apiserver on the same etcd, behind a lagging link")
	a, err := st.env.ControlPlane.AddAPIServer(ctx)
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(st.tmp, "lagging.kubeconfig")
	if err := writeKubeconfig(st.env.ControlPlane.Kubeconfig, path, a.Config.Host); err != nil {
		return nil, "", err
	}
	st.lagging, st.laggingKubeconfig = a, path
	return a, path, nil
}

// writeKubeconfig copies the kubeconfig at from to to, every cluster's
// server set to host.
func writeKubeconfig(from, to, host string) error {
	cfg, err := clientcmd.LoadFromFile(from)
	if err != nil {
		return fmt.Errorf("read kubeconfig: %w", err)
	}
	for _, c := range cfg.Clusters {
		c.Server = host
	}
	if err := clientcmd.WriteToFile(*cfg, to); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

func (st *stack) adminConfig() *rest.Config { return rest.CopyConfig(st.env.Config) }

func (st *stack) setWindow(create bool, d time.Duration) {
	st.win.mu.Lock()
	defer st.win.mu.Unlock()
	if create && st.win.create == 0 {
		st.win.create = d
	}
	if !create && st.win.delete == 0 {
		st.win.delete = d
	}
}

// window is a measured window, or def before one was measured.
func (st *stack) window(create bool, def time.Duration) time.Duration {
	st.win.mu.Lock()
	defer st.win.mu.Unlock()
	w := st.win.delete
	if create {
		w = st.win.create
	}
	return cmp.Or(w, def)
}

func (st *stack) close() {
	for _, p := range st.proxies {
		_ = p.Close() // the run is over
	}
	if st.service != nil {
		st.service.stop(5 * time.Second)
	}
	if st.env != nil {
		if err := st.env.Stop(); err != nil {
			progress(st.log, "stopping the control plane: %v", err)
		}
	}
}

// freeAddr returns a free loopback host:port.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// leftover is one object still there at a run's end.
type leftover struct {
	Kind, Namespace, Name string
	Deleting              time.Duration // since its deletionTimestamp; 0 when not deleting
	Finalizers            []string
	gvr                   schema.GroupVersionResource
}

// unremarkable are objects every namespace gets, left out of listings.
func unremarkable(kind, name string) bool {
	return (kind == "ServiceAccount" && name == "default") || (kind == "ConfigMap" && name == "kube-root-ca.crt") || kind == "Event"
}

// leftovers lists what is in the namespaces, every listable kind, as
// metadata (kubectl get all would miss custom kinds), and the conditions of
// a terminating namespace.
func (st *stack) leftovers(ctx context.Context, namespaces ...string) ([]leftover, []string, error) {
	_, lists, err := st.disc.ServerGroupsAndResources()
	if err != nil && len(lists) == 0 {
		return nil, nil, err
	}
	seen := map[schema.GroupResource]bool{}
	var out []leftover
	now := time.Now()
	for _, l := range lists {
		gv, perr := schema.ParseGroupVersion(l.GroupVersion)
		if perr != nil {
			continue
		}
		for _, r := range l.APIResources {
			if !r.Namespaced || strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			gr := gv.WithResource(r.Name).GroupResource()
			if seen[gr] || (gr.Group == "events.k8s.io") {
				continue
			}
			seen[gr] = true
			for _, ns := range namespaces {
				ml, err := st.meta.Resource(gv.WithResource(r.Name)).Namespace(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					continue // a kind this cluster serves but will not list here
				}
				for _, o := range ml.Items {
					if unremarkable(r.Kind, o.Name) {
						continue
					}
					lo := leftover{Kind: r.Kind, Namespace: ns, Name: o.Name, Finalizers: o.Finalizers, gvr: gv.WithResource(r.Name)}
					if o.DeletionTimestamp != nil {
						lo.Deleting = now.Sub(o.DeletionTimestamp.Time)
					}
					out = append(out, lo)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b leftover) int {
		return strings.Compare(a.Namespace+"/"+a.Kind+"/"+a.Name, b.Namespace+"/"+b.Kind+"/"+b.Name)
	})
	var conds []string
	for _, ns := range namespaces {
		if st.c == nil {
			break // Release's stack reads metadata only
		}
		var n corev1.Namespace
		if err := st.c.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			continue
		}
		for _, c := range n.Status.Conditions {
			if c.Status == "True" {
				conds = append(conds, fmt.Sprintf("namespace %s %s: %s", ns, c.Type, c.Message))
			}
		}
	}
	return out, conds, nil
}

// release removes the finalizers of everything left in the namespaces, so
// that a broken run's namespaces go and the next run starts clean.
func (st *stack) release(ctx context.Context, namespaces ...string) error {
	left, _, err := st.leftovers(ctx, namespaces...)
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range left {
		if len(l.Finalizers) == 0 {
			continue
		}
		_, err := st.meta.Resource(l.gvr).Namespace(l.Namespace).Patch(ctx, l.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("release %s %s/%s: %w", l.Kind, l.Namespace, l.Name, err))
		}
	}
	return errors.Join(errs...)
}

func progress(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "finale check: "+format+"\n", args...)
	}
}
