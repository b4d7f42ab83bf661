package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/internal/procstat"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/pgserver"
)

// Scale is the result of RunScale: each build once, at Namespaces ×
// PerNamespace Roles.
type Scale struct {
	Namespaces, PerNamespace int
	On, Naive                ScaleRun
}

// Roles is the number of Roles of each run.
func (s Scale) Roles() int { return s.Namespaces * s.PerNamespace }

// ScaleRun is one build's run at scale.
type ScaleRun struct {
	// Ready is from the first create to every Role Ready; Gone from the
	// deletes to every Role gone (every role dropped).
	Ready, Gone time.Duration
	// PeakRSS is the operator process's VmHWM at the end of the run.
	PeakRSS int64
	// Records and RecordBytes are the cleanup record ConfigMaps once every
	// Role was Ready, and their size as the API server serves them (JSON,
	// managed fields included); RoleBytes is the same for the Roles, the
	// objects the records stand beside.
	Records     int
	RecordBytes int64
	RoleBytes   int64
	// Load is what the API server counted from the first create to the
	// last Role gone; Watches is the watches open once every Role was
	// Ready.
	Load    APILoad
	Watches float64
	// Setup is the run's setup before the clock starts: namespaces,
	// Servers, the operator's start and its Servers Ready.
	Setup time.Duration
}

// ScaleOptions are RunScale's.
type ScaleOptions struct {
	Namespaces, PerNamespace int
	// Operator returns the reference operator's command (package app)
	// with args, to run as a child process: its peak RSS is its own.
	Operator func(args ...string) (*exec.Cmd, error)
	// Dir holds the operator's logs.
	Dir string
}

// scaleCreators bounds the bench's concurrent creates and deletes: enough
// to keep the API server busy, the same for both builds.
const scaleCreators = 16

// scaleWaitLimit bounds each wait of a run at scale.
const scaleWaitLimit = 60 * time.Minute

// scalePoll is how often the bench looks at its cache while waiting: a
// scan of every Role, cheap against the seconds measured.
const scalePoll = 200 * time.Millisecond

// RunScale runs the operator with the guarantees on, then the naive build,
// each as a process of its own on the same stack, each with Namespaces ×
// PerNamespace Roles: created, all Ready, deleted, all gone.
func RunScale(ctx context.Context, s Stack, o ScaleOptions) (Scale, error) {
	if o.Namespaces <= 0 || o.PerNamespace <= 0 {
		return Scale{}, fmt.Errorf("bench: %d namespaces of %d Roles: give at least one of each", o.Namespaces, o.PerNamespace)
	}
	if o.Operator == nil || s.ControlPlane == nil || s.Postgres == nil {
		return Scale{}, errors.New("bench: RunScale needs ScaleOptions.Operator, Stack.ControlPlane and Stack.Postgres")
	}
	res := Scale{Namespaces: o.Namespaces, PerNamespace: o.PerNamespace}
	for _, naive := range []bool{false, true} {
		r, err := scaleRun(ctx, s, o, naive)
		if err != nil {
			return res, fmt.Errorf("bench: scale, %s: %w", buildOf(naive).name, err)
		}
		if naive {
			res.Naive = r
		} else {
			res.On = r
		}
	}
	return res, nil
}

// scaleEnv is one run's namespaces, beside env's (whose namespace holds no
// Roles here and whose records namespace is the operator's).
type scaleEnv struct {
	*env
	nss []string
}

func scaleRun(ctx context.Context, s Stack, o ScaleOptions, naive bool) (ScaleRun, error) {
	var res ScaleRun
	setupStart := time.Now()
	e, err := s.setup(ctx)
	if err != nil {
		return res, err
	}
	defer e.close()
	se := &scaleEnv{env: e}
	defer se.closeNamespaces()
	b := buildOf(naive)
	s.logf("scale, %s: %d namespaces of %d Roles", b.name, o.Namespaces, o.PerNamespace)
	if err := se.createNamespaces(ctx, o.Namespaces); err != nil {
		return res, err
	}
	watch, stopWatch, err := se.watch(ctx)
	if err != nil {
		return res, err
	}
	defer stopWatch()
	op, err := startOperatorProcess(o.Operator, operatorArgs(s, e.recNS, b), filepath.Join(o.Dir, fmt.Sprintf("operator-%s.log", b.fileName())))
	if err != nil {
		return res, err
	}
	defer op.stop()
	if err := se.waitServers(ctx, watch, op); err != nil {
		return res, err
	}
	res.Setup = time.Since(setupStart)
	load0, err := readAPILoad(ctx, s.Config)
	if err != nil {
		return res, err
	}
	n := o.Namespaces * o.PerNamespace
	start := time.Now()
	if err := se.createRoles(ctx, o.PerNamespace); err != nil {
		return res, err
	}
	if err := se.waitRoles(ctx, watch, op, "all Ready", func(ready, total int) bool { return ready == n }); err != nil {
		return res, err
	}
	res.Ready = time.Since(start)
	atReady, err := readAPILoad(ctx, s.Config)
	if err != nil {
		return res, err
	}
	res.Watches = atReady.Watches
	s.logf("  all %d Ready after %s (setup before it: %s)", n, res.Ready.Round(time.Millisecond), res.Setup.Round(time.Millisecond))
	// Sized outside the clock: reading them is the bench's, not the build's.
	if res.Records, res.RecordBytes, err = objectBytes(ctx, e.c, &corev1.ConfigMapList{}, client.InNamespace(e.recNS), client.HasLabels{ledger.LabelRecord}); err != nil {
		return res, err
	}
	if _, res.RoleBytes, err = objectBytes(ctx, e.c, &v1alpha1.RoleList{}); err != nil {
		return res, err
	}
	deleteStart := time.Now()
	if err := se.deleteRoles(ctx); err != nil {
		return res, err
	}
	if err := se.waitRoles(ctx, watch, op, "all gone", func(_, total int) bool { return total == 0 }); err != nil {
		return res, err
	}
	res.Gone = time.Since(deleteStart)
	load1, err := readAPILoad(ctx, s.Config)
	if err != nil {
		return res, err
	}
	res.Load = load1.Sub(load0)
	s.logRequests(res.Load)
	if res.PeakRSS, err = procstat.PeakRSS(op.cmd.Process.Pid); err != nil {
		return res, err
	}
	s.logf("  all gone %s later; operator peak RSS %.0f MiB; %d records, %.1f MiB", res.Gone.Round(time.Millisecond),
		float64(res.PeakRSS)/(1<<20), res.Records, float64(res.RecordBytes)/(1<<20))
	if err := e.noRolesLeft(ctx); err != nil {
		return res, err
	}
	return res, se.deleteNamespaces(ctx)
}

// createNamespaces makes n namespaces, each with the admin Secret and a
// Server named pg, as env.setup does for one.
func (se *scaleEnv) createNamespaces(ctx context.Context, n int) error {
	for range n {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "finale-scale-"}}
		if err := se.c.Create(ctx, ns); err != nil {
			return err
		}
		se.nss = append(se.nss, ns.Name)
		objs := []client.Object{
			&corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "pg-admin"},
				Data:       map[string][]byte{"username": []byte(pgserver.AdminUser), "password": []byte(se.s.Postgres.Password)},
			},
			&v1alpha1.Server{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "pg"},
				Spec: v1alpha1.ServerSpec{
					Host: se.s.Postgres.Host, Port: int32(se.s.Postgres.Port), SSLMode: v1alpha1.SSLModeDisable,
					CredentialsSecretRef: v1alpha1.CredentialsSecretReference{Name: "pg-admin"},
				},
			},
		}
		for _, o := range objs {
			if err := se.c.Create(ctx, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteNamespaces deletes every namespace of the run, the operator still
// running (it releases the Servers' holds), and waits until they are gone,
// so that the namespace controller's work is over before the next run is
// measured.
func (se *scaleEnv) deleteNamespaces(ctx context.Context) error {
	nss := append([]string{se.ns, se.recNS}, se.nss...)
	for _, ns := range nss {
		if err := se.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	for _, ns := range nss {
		if err := controlplane.WaitGone(ctx, se.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, scaleWaitLimit); err != nil {
			return err
		}
	}
	return nil
}

// closeNamespaces deletes the run's namespaces without waiting, as
// env.close does, when the run ended before deleteNamespaces.
func (se *scaleEnv) closeNamespaces() {
	for _, ns := range se.nss {
		_ = se.c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) // best effort
	}
}

// watch starts the bench's own informers of Servers and Roles, which it
// waits on: the same watch for both builds, and no polling Lists of the
// API server it measures.
func (se *scaleEnv) watch(ctx context.Context) (cache.Cache, func(), error) {
	byNS := map[string]cache.Config{}
	for _, ns := range se.nss {
		byNS[ns] = cache.Config{}
	}
	c, err := cache.New(se.s.Config, cache.Options{Scheme: se.scheme, DefaultNamespaces: byNS})
	if err != nil {
		return nil, nil, err
	}
	for _, o := range []client.Object{&v1alpha1.Server{}, &v1alpha1.Role{}} {
		if _, err := c.GetInformer(ctx, o); err != nil {
			return nil, nil, err
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Start(cctx) }() // ends with cctx
	stop := func() { cancel(); <-done }
	if !c.WaitForCacheSync(ctx) {
		stop()
		return nil, nil, errors.New("bench: the bench's cache did not sync")
	}
	return c, stop, nil
}

func readyServers(l []v1alpha1.Server, nss []string) int {
	n := 0
	for _, srv := range l {
		if srv.Name == "pg" && slices.Contains(nss, srv.Namespace) && meta.IsStatusConditionTrue(srv.Status.Conditions, v1alpha1.ConditionReady) {
			n++
		}
	}
	return n
}

// createRoles creates perNS Roles in every namespace of the run, a few at
// a time.
func (se *scaleEnv) createRoles(ctx context.Context, perNS int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(scaleCreators)
	for i, ns := range se.nss {
		for j := range perNS {
			g.Go(func() error {
				return se.c.Create(gctx, benchRole(ns, j, fmt.Sprintf("%s%d_%d", se.prefix, i, j)))
			})
		}
	}
	return g.Wait()
}

// deleteRoles deletes every Role of the run, one collection delete per
// namespace.
func (se *scaleEnv) deleteRoles(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(scaleCreators)
	for _, ns := range se.nss {
		g.Go(func() error { return se.c.DeleteAllOf(gctx, &v1alpha1.Role{}, client.InNamespace(ns)) })
	}
	return g.Wait()
}

// waitServers waits on the bench's cache until the Server of every
// namespace of the run is Ready, failing early when the operator exits.
func (se *scaleEnv) waitServers(ctx context.Context, c client.Reader, op *operatorProcess) error {
	return controlplane.WaitEvery(ctx, scalePoll, scaleWaitLimit, "every Server Ready", func(ctx context.Context) (bool, error) {
		if err := op.exited(); err != nil {
			return false, err
		}
		var l v1alpha1.ServerList
		if err := c.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
			return false, err
		}
		return readyServers(l.Items, se.nss) == len(se.nss), nil
	})
}

// waitRoles waits on the bench's cache until done(ready, total) over the
// run's Roles, failing early when the operator exits.
func (se *scaleEnv) waitRoles(ctx context.Context, c client.Reader, op *operatorProcess, what string, done func(ready, total int) bool) error {
	return controlplane.WaitEvery(ctx, scalePoll, scaleWaitLimit, what, func(ctx context.Context) (bool, error) {
		if err := op.exited(); err != nil {
			return false, err
		}
		var l v1alpha1.RoleList
		if err := c.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
			return false, err
		}
		return done(readyCount(&l), len(l.Items)), nil
	})
}

// objectBytes lists what opts select in pages and returns how many there
// are and their size as served (JSON).
func objectBytes(ctx context.Context, c client.Reader, l client.ObjectList, opts ...client.ListOption) (int, int64, error) {
	n, size, cont := 0, int64(0), ""
	for {
		if err := c.List(ctx, l, append(opts, client.Limit(500), client.Continue(cont))...); err != nil {
			return 0, 0, err
		}
		items, err := itemsOf(l)
		if err != nil {
			return 0, 0, err
		}
		for _, it := range items {
			raw, err := json.Marshal(it)
			if err != nil {
				return 0, 0, err
			}
			n++
			size += int64(len(raw))
		}
		if cont = l.GetContinue(); cont == "" {
			return n, size, nil
		}
	}
}

func itemsOf(l client.ObjectList) ([]any, error) {
	var out []any
	switch l := l.(type) {
	case *corev1.ConfigMapList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *v1alpha1.RoleList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("bench: cannot size a %T", l)
	}
	return out, nil
}

// operatorProcess is the operator running as a child process.
type operatorProcess struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  atomic.Pointer[error]
}

// operatorStopWait bounds the operator's graceful stop.
const operatorStopWait = 30 * time.Second

// operatorArgs are the operator process's arguments on s's control plane,
// its records in recNS.
func operatorArgs(s Stack, recNS string, b build) []string {
	args := []string{"--kubeconfig", s.ControlPlane.Kubeconfig, "--records-namespace", recNS,
		"--metrics-bind-address=0", "--health-probe-bind-address=0"}
	if b.naive {
		args = append(args, "--naive")
	}
	if b.skip&lifecycle.SkipLedger != 0 {
		args = append(args, "--skip=records")
	}
	if b.skip&lifecycle.SkipHold != 0 {
		args = append(args, "--skip=hold")
	}
	return args
}

// startOperatorProcess starts command(args...) (the reference
// operator's), its output to logPath.
func startOperatorProcess(command func(args ...string) (*exec.Cmd, error), args []string, logPath string) (*operatorProcess, error) {
	cmd, err := command(args...)
	if err != nil {
		return nil, err
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		_ = f.Close() // nothing was written
		return nil, fmt.Errorf("bench: start the operator: %w", err)
	}
	p := &operatorProcess{cmd: cmd, log: f, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if err == nil {
			err = errors.New("exited")
		}
		err = fmt.Errorf("bench: the operator process ended early (%w); its log: %s", err, logPath)
		p.err.Store(&err)
		close(p.done)
	}()
	return p, nil
}

// exited is the operator's exit, as an error, once it has ended.
func (p *operatorProcess) exited() error {
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

// stop ends the operator: SIGTERM, then SIGKILL after operatorStopWait.
func (p *operatorProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // it may have ended already
	t := time.NewTimer(operatorStopWait)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill() // it did not stop in time
		<-p.done
	}
	_ = p.log.Close() // its figures are taken
}
