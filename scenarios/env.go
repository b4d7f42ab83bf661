package scenarios

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/config/crd"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/scenarios/internal/operator"
)

// Env is where scenarios run: a real control plane and a real PostgreSQL.
// Scenarios isolate themselves by fresh namespaces and by a random prefix on
// every PostgreSQL name, so several may share one Env one after the other.
// Two scenarios must not run at the same time on one Env: each runs its own
// operator, which watches every namespace.
type Env struct {
	ControlPlane *controlplane.ControlPlane
	Postgres     *pgserver.Server
	// Bound is how long a deletion may take, once its faults healed, before
	// it counts as not finished; zero is DefaultBound.
	Bound time.Duration
	// Temporal is the server the temporal-* scenarios run against; empty
	// starts one for the run (internal/temporalbin).
	Temporal TemporalServer
}

// DefaultBound is the "finished" invariant's bound when Env.Bound is zero.
// It is generous for 2 shared cores: a namespace deletion by the real
// namespace controller alone takes several seconds.
const DefaultBound = 90 * time.Second

// ErrEnv means an Env lacks its control plane or PostgreSQL.
var ErrEnv = errors.New("scenarios: Env needs a ControlPlane and a Postgres (start them with controlplane.Start and pgserver.Start)")

// readyTimeout bounds every wait for objects to be Ready. A create that
// outlasts the call timeout under load, or that a crash interrupts, is in
// doubt for twice the call timeout and the landing (21 s) before the next
// attempt. A bound only costs time when something is broken.
const readyTimeout = 3 * time.Minute

func (e Env) bound() time.Duration {
	if e.Bound > 0 {
		return e.Bound
	}
	return DefaultBound
}

func (e Env) check() error {
	if e.ControlPlane == nil || e.Postgres == nil {
		return ErrEnv
	}
	return nil
}

// Operator tuning for every scenario: short enough that faults heal within
// a run, long enough not to fire on a slow shared machine. The call timeout
// must also outlast a CREATE DATABASE under make test's load, or every
// attempt creates nothing (controller.StatementTimeout says why) and waits
// out its create-in-doubt window before the next: at 2 s, a crash
// campaign's Database in CI was still in doubt after 90 s.
const (
	callTimeout   = 5 * time.Second
	retryInterval = time.Second
	holdTimeout   = 10 * time.Minute
	serverName    = "pg"
	secretName    = "pg-admin"
)

var crdOnce sync.Map // *rest.Config -> struct{}: CRDs installed on that control plane

// world is one scenario run: an admin client, an admin PostgreSQL
// connection, a proxy in front of PostgreSQL, a records namespace, and the
// reference operator, which it starts, crashes and restarts.
type world struct {
	env    Env
	scheme *runtime.Scheme
	c      client.Client
	db     *pgx.Conn
	proxy  *faultinject.Proxy
	clock  *jumpClock
	recNS  string
	prefix string
	naive  bool
	// only, when set, restricts the operator's caches (and so its
	// watches) to these namespaces plus the records namespace, so that
	// several worlds run side by side without acting on each other's
	// objects. Written only by the goroutine driving the world, between
	// runs, while the operator is stopped.
	only []string

	// mu guards everything below: the operator is stopped from OnCrash,
	// which runs on a reconcile goroutine.
	mu  sync.Mutex
	run *operator.Running
	// uids of every Role and Database this run created, for the leak
	// check's scope.
	uids map[string]bool
	// stmts, when set, is the next operator's statement hook (the crash
	// campaign's external crash points); start consumes it, so a restart
	// runs without it.
	stmts func(ctx context.Context, sql string, err error)
	// gate pauses the running operator's Role controller workers alone
	// (the randomized campaign's "paused workers"); each start makes a new
	// one, so a restart resumes.
	gate *faultinject.Gate
	// events delays the running operator's Role controller's watch events
	// (the randomized campaign's stale views); each start makes a new one.
	events *faultinject.EventFault

	// apiB, cacheFront and writeFront are set by addAPIServer (the
	// campaign's apiserver faults, apiservers.go): the world's own second
	// apiserver and the fronts the operator's cache and writes go through.
	// Written only by the goroutine driving the world.
	apiB                   *controlplane.APIServer
	cacheFront, writeFront *controlplane.Front
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

func newWorld(ctx context.Context, env Env, naive bool) (*world, error) {
	if err := env.check(); err != nil {
		return nil, err
	}
	w := &world{env: env, scheme: newScheme(), naive: naive, uids: map[string]bool{},
		clock: &jumpClock{}}
	var err error
	if w.c, err = client.New(env.ControlPlane.Config, client.Options{Scheme: w.scheme}); err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	if _, done := crdOnce.Load(env.ControlPlane.Config); !done {
		crds, err := crd.CRDs()
		if err != nil {
			return nil, err
		}
		if err := controlplane.InstallCRDs(ctx, w.c, crds...); err != nil {
			return nil, fmt.Errorf("install the operator's CRDs: %w", err)
		}
		crdOnce.Store(env.ControlPlane.Config, struct{}{})
	}
	if w.db, err = pgx.Connect(ctx, env.Postgres.DSN()); err != nil {
		return nil, fmt.Errorf("admin connection to PostgreSQL: %w", err)
	}
	if w.proxy, err = faultinject.NewProxy(env.Postgres.Addr()); err != nil {
		_ = w.db.Close(ctx)
		return nil, err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	w.prefix = "sc_" + hex.EncodeToString(b[:]) + "_"
	if w.recNS, err = w.namespace(ctx, "finale-records-"); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// close stops the operator and releases the world's connections.
func (w *world) close() {
	w.stop()
	_ = w.proxy.Close()
	_ = w.db.Close(context.Background())
	w.closeAPIServer()
}

func (w *world) namespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := w.c.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("create namespace: %w", err)
	}
	return ns.Name, nil
}

// start runs the operator in-process. script, when set, faults its API
// client and crashes it: OnCrash cancels the manager, dropping its caches
// and its connection pool, as a process exit would.
func (w *world) start(ctx context.Context, script *faultinject.Script) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.run != nil {
		return nil
	}
	var clk clock.Clock = w.clock
	stmts := w.stmts
	w.stmts = nil
	gate := &faultinject.Gate{}
	events := &faultinject.EventFault{}
	var nss []string
	if len(w.only) > 0 {
		nss = append([]string{w.recNS}, w.only...)
	}
	// The operator outlives the call that starts it: stop ends it.
	cfg, cacheCfg, writeCfg := w.env.ControlPlane.Config, (*rest.Config)(nil), (*rest.Config)(nil)
	if w.cacheFront != nil {
		cfg, cacheCfg, writeCfg = w.writeFront.Config, w.cacheFront.Config, w.writeFront.Config
	}
	run, err := operator.Start(context.WithoutCancel(ctx), operator.Options{
		Config: cfg, CacheConfig: cacheCfg, WriteConfig: writeCfg, Scheme: w.scheme, Script: script, Namespaces: nss,
		Operator: controller.Options{
			Statements: stmts,
			WrapReconciler: func(name string, r reconcile.Reconciler) reconcile.Reconciler {
				if name != controller.ControllerRole {
					return r
				}
				gate.Inner = r
				return gate
			},
			WrapEventHandler: func(name string, h handler.EventHandler) handler.EventHandler {
				if name != controller.ControllerRole {
					return h
				}
				return events.Handler(h)
			},
			RecordsNamespace: w.recNS,
			Naive:            w.naive,
			Clock:            clk,
			HoldTimeout:      holdTimeout,
			CallTimeout:      callTimeout,
			ConnectTimeout:   callTimeout,
			RetryInterval:    retryInterval,
			// The invariants' bounds are tens of seconds: retries stay
			// within seconds here (production backs off to minutes, which
			// scenarios/bench measures).
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](200*time.Millisecond, 5*time.Second),
			Workers:     2,
			PoolName:    "scenarios",
		},
	})
	if err != nil {
		return err
	}
	w.run, w.gate, w.events = run, gate, events
	return nil
}

// stop stops the operator, if it runs, and waits until it has.
func (w *world) stop() {
	w.mu.Lock()
	run := w.run
	w.run, w.gate, w.events = nil, nil, nil
	w.mu.Unlock()
	if run != nil {
		_ = run.Stop() // a crashed or stopped operator's exit is the scenario's point, not an error
	}
}

// server creates the credential Secret and the Server in ns, the Server
// pointing at the proxy so that faults can be put between operator and
// PostgreSQL.
func (w *world) server(ctx context.Context, ns string) error {
	return createServer(ctx, w.c, ns, w.proxy.Addr(), w.env.Postgres.Password)
}

// createServer creates the credential Secret (PostgreSQL's admin user with
// password) and the Server in ns, the Server pointing at addr.
func createServer(ctx context.Context, c client.Client, ns, addr, password string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return err
	}
	objs := []client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName},
			Data:       map[string][]byte{"username": []byte(pgserver.AdminUser), "password": []byte(password)},
		},
		&v1alpha1.Server{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: serverName},
			Spec: v1alpha1.ServerSpec{
				Host: host, Port: int32(p), SSLMode: v1alpha1.SSLModeDisable,
				CredentialsSecretRef: v1alpha1.CredentialsSecretReference{Name: secretName},
			},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s/%s: %w", o, ns, o.GetName(), err)
		}
	}
	return nil
}

func (w *world) role(ns, name string) *v1alpha1.Role {
	return &v1alpha1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RoleSpec{
			ServerRef: v1alpha1.ServerReference{Name: serverName}, RoleName: w.prefix + ns[len(ns)-5:] + "_" + name,
			DeletionPolicy: v1alpha1.DeletionPolicyDelete,
		},
	}
}

func (w *world) database(ns, name string) *v1alpha1.Database {
	return &v1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.DatabaseSpec{
			ServerRef: v1alpha1.ServerReference{Name: serverName}, DatabaseName: w.prefix + ns[len(ns)-5:] + "_" + name,
			DeletionPolicy: v1alpha1.DeletionPolicyDelete,
		},
	}
}

// create creates obj and remembers its UID for the leak check's scope.
func (w *world) create(ctx context.Context, obj client.Object) error {
	if err := w.c.Create(ctx, obj); err != nil {
		return fmt.Errorf("create %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	w.mu.Lock()
	w.uids[string(obj.GetUID())] = true
	w.mu.Unlock()
	return nil
}

func (w *world) scope() Scope {
	w.mu.Lock()
	defer w.mu.Unlock()
	uids := make(map[string]bool, len(w.uids))
	for k, v := range w.uids {
		uids[k] = v
	}
	return Scope{NamePrefix: w.prefix, OwnerUIDs: uids}
}

// waitReady waits until every object is Ready.
func (w *world) waitReady(ctx context.Context, timeout time.Duration, objs ...client.Object) error {
	for _, o := range objs {
		err := controlplane.WaitFor(ctx, timeout, fmt.Sprintf("%T %s/%s Ready", o, o.GetNamespace(), o.GetName()), func(ctx context.Context) (bool, error) {
			if err := w.c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return false, err
			}
			return ready(o), nil
		})
		if err != nil {
			return fmt.Errorf("%w; conditions: %s", err, conditionsOf(o))
		}
	}
	return nil
}

// conditionsOf says where an object that is not Ready stands.
func conditionsOf(o client.Object) string {
	var parts []string
	for _, c := range statusConditions(o) {
		parts = append(parts, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

func statusConditions(o client.Object) []metav1.Condition {
	switch o := o.(type) {
	case *v1alpha1.Role:
		return o.Status.Conditions
	case *v1alpha1.Database:
		return o.Status.Conditions
	case *v1alpha1.Server:
		return o.Status.Conditions
	}
	return nil
}

func ready(o client.Object) bool {
	for _, c := range statusConditions(o) {
		if c.Type == v1alpha1.ConditionReady {
			return c.Status == metav1.ConditionTrue && c.ObservedGeneration >= o.GetGeneration()
		}
	}
	return false
}

// deleteNamespace asks for the namespace's deletion.
func (w *world) deleteNamespace(ctx context.Context, ns string) error {
	err := w.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	return client.IgnoreNotFound(err)
}

// say writes one line of narration.
func say(out io.Writer, format string, args ...any) {
	if out != nil {
		fmt.Fprintf(out, format+"\n", args...)
	}
}

// lockedWriter serializes the narration of runs that go side by side.
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// serialized returns out made safe for concurrent narration (nil stays nil).
func serialized(out io.Writer) io.Writer {
	if out == nil {
		return nil
	}
	return &lockedWriter{w: out}
}

// pauseRole pauses the running operator's Role controller workers, if it
// runs: reconciles already running finish, new ones wait until resumeRole,
// a restart or the operator's stop.
func (w *world) pauseRole() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gate == nil {
		return false
	}
	w.gate.Pause()
	return true
}

// resumeRole lets the Role controller's waiting reconciles run.
func (w *world) resumeRole() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gate != nil {
		w.gate.Resume()
	}
}

// setStatements arms the next start's statement hook.
func (w *world) setStatements(f func(ctx context.Context, sql string, err error)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stmts = f
}

// crash cancels the running operator's manager without waiting, as a
// Script's OnCrash does: callable from a reconcile goroutine.
func (w *world) crash() {
	w.mu.Lock()
	run := w.run
	w.mu.Unlock()
	if run != nil {
		run.Crash()
	}
}

// delayRoleEvents delays the running operator's Role controller's watch
// events by d (0 delivers at once), if it runs.
func (w *world) delayRoleEvents(d time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.events == nil {
		return false
	}
	w.events.SetDelay(d)
	return true
}
