package hold_test

// The test operator: CRDs in group hold.test.finale.dev, a parent "Server"
// (host, port, secretName) whose Secret holds PostgreSQL credentials, and
// dependents "Role" whose reconciler creates a PostgreSQL role tagged with
// COMMENT ON ROLE and drops it in its cleanup finalizer, reading the
// connection details from the Server and its Secret at deletion time.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/pgserver"
)

const (
	testGroup        = "hold.test.finale.dev"
	cleanupFinalizer = "hold.test.finale.dev/drop-role"
	// roleRetry is the backoff between failed drop passes.
	roleRetry = 200 * time.Millisecond
)

var (
	serverGVK = schema.GroupVersionKind{Group: testGroup, Version: "v1", Kind: "Server"}
	roleGVK   = schema.GroupVersionKind{Group: testGroup, Version: "v1", Kind: "Role"}
)

func crd(kind, plural string) *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + testGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: testGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
}

func newServer() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(serverGVK)
	return u
}

func newRole() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(roleGVK)
	return u
}

func specString(o client.Object, field string) string {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	s, _, _ := unstructured.NestedString(u.Object, "spec", field)
	return s
}

// pgRoleName is the PostgreSQL role a Role object owns: derived from its
// UID, so two objects never share one.
func pgRoleName(uid types.UID) string {
	return "hold_" + strings.ReplaceAll(string(uid), "-", "")
}

// serverSecretName and roleServerName are the hold's configuration.
func serverSecretName(o client.Object) string { return specString(o, "secretName") }
func roleServerName(o client.Object) string   { return specString(o, "serverName") }

// holdConfig configures the hold for Server, its Secret and Role.
func holdConfig(clk clock.PassiveClock, rec hold.Recorder) hold.Config {
	return hold.Config{
		Parent:     newServer(),
		SecretName: serverSecretName,
		Dependents: []hold.Dependent{{
			Object:           newRole(),
			ParentName:       roleServerName,
			CleanupFinalizer: cleanupFinalizer,
		}},
		Scheme:   testenv.Scheme(),
		Clock:    clk,
		Recorder: rec,
		Recheck:  time.Second,
	}
}

// events records the Events the hold emits, and forwards them.
type events struct {
	next hold.Recorder

	mu      sync.Mutex     // guards reasons
	reasons map[string]int // by reason
}

func (e *events) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	e.mu.Lock()
	if e.reasons == nil {
		e.reasons = map[string]int{}
	}
	e.reasons[reason]++
	e.mu.Unlock()
	if e.next != nil {
		e.next.Eventf(regarding, related, eventtype, reason, action, note, args...)
	}
}

func (e *events) count(reason string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reasons[reason]
}

// operator is one run of the test operator: a manager with the hold's
// controllers and the Role controller.
type operator struct {
	hold   *hold.Hold
	events *events
	client client.Client
	cancel context.CancelFunc
	done   chan error
}

var logOnce sync.Once

// operatorOptions tune startOperator.
type operatorOptions struct {
	clock clock.PassiveClock
	// access, when set, builds the hold's Access from the manager's client.
	access func(client.Reader) hold.Access
	policy hold.AccessPolicy
	// owned, when set, builds the hold's Owned check.
	owned func(client.Reader) hold.Owned
	// timeout, when set, is the hold's Timeout (a test setting: the
	// default is hold.DefaultTimeout).
	timeout time.Duration
}

func startOperator(t testing.TB, opts operatorOptions) *operator {
	t.Helper()
	logOnce.Do(func() { ctrl.SetLogger(logr.Discard()) })
	cp := testenv.ControlPlane(t)
	installCRDs(t, testenv.Client(t, testenv.Scheme()))
	ensureRecordsNamespace(t, testenv.Client(t, testenv.Scheme()))
	mgr, err := ctrl.NewManager(cp.Config, manager.Options{
		Scheme:                 testenv.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{next: mgr.GetEventRecorder("finale-hold-test")}
	cfg := holdConfig(opts.clock, ev)
	if opts.access != nil {
		cfg.Access = opts.access(mgr.GetClient())
	}
	if opts.owned != nil {
		cfg.Owned = opts.owned(mgr.GetClient())
	}
	cfg.AccessPolicy = opts.policy
	cfg.Timeout = opts.timeout
	h, err := hold.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	store, err := ledger.NewConfigMapStore(ledger.ReadWriter{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient()}, recordsNamespace)
	if err != nil {
		t.Fatal(err)
	}
	rr := &roleReconciler{c: mgr.GetClient(), hold: h, ledger: newLedger(t, store, opts.clock)}
	err = ctrl.NewControllerManagedBy(mgr).Named("holdtest-role").For(newRole()).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).Complete(rr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	op := &operator{hold: h, events: ev, client: mgr.GetClient(), cancel: cancel, done: make(chan error, 1)}
	go func() { op.done <- mgr.Start(ctx) }()
	t.Cleanup(op.stop)
	return op
}

// stop ends the manager and waits for it; calling it twice is fine.
func (o *operator) stop() {
	o.cancel()
	if err, ok := <-o.done; ok {
		close(o.done)
		if err != nil && !errors.Is(err, context.Canceled) {
			panic(fmt.Sprintf("operator: %v", err))
		}
	}
}

// conn is how a Role reaches PostgreSQL: host and port from its Server,
// user and password from the Server's Secret, read on every call.
func connect(ctx context.Context, c client.Reader, server client.Object) (*pgx.Conn, error) {
	var s corev1.Secret
	key := types.NamespacedName{Namespace: server.GetNamespace(), Name: serverSecretName(server)}
	if err := c.Get(ctx, key, &s); err != nil {
		return nil, fmt.Errorf("read credentials %s: %w", key, err)
	}
	dsn := fmt.Sprintf("postgres://%s:%s@%s/postgres?sslmode=disable&connect_timeout=5",
		s.Data["username"], s.Data["password"], specString(server, "host")+":"+specString(server, "port"))
	return pgx.Connect(ctx, dsn)
}

// serverAccess is the hold's Access for Server: can the operator log in
// with the Secret's credentials right now.
func serverAccess(r client.Reader) hold.Access {
	return hold.AccessFn(func(ctx context.Context, parent client.Object) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := connect(ctx, r, parent)
		if err != nil {
			return false, err
		}
		return true, conn.Close(ctx)
	})
}

type roleReconciler struct {
	c      client.Client
	hold   *hold.Hold
	ledger *ledger.Ledger
}

// createdAnnotation marks a Role whose role exists and is recorded, so that
// later reconciles do not refresh its record.
const createdAnnotation = "hold.test.finale.dev/created"

func (r *roleReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	role := newRole()
	if err := r.c.Get(ctx, req.NamespacedName, role); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	serverName := roleServerName(role)
	var server client.Object = newServer()
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: role.GetNamespace(), Name: serverName}, server); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		server = nil
	}
	name := pgRoleName(role.GetUID())
	if role.GetDeletionTimestamp().IsZero() {
		if controllerutil.AddFinalizer(role, cleanupFinalizer) {
			return reconcile.Result{}, r.c.Update(ctx, role)
		}
		if !r.hold.Held(server) {
			// Create nothing the hold does not cover yet.
			return reconcile.Result{RequeueAfter: roleRetry}, nil
		}
		if role.GetAnnotations()[createdAnnotation] != "" {
			return reconcile.Result{}, nil
		}
		if err := r.create(ctx, server, role, name); err != nil {
			return reconcile.Result{RequeueAfter: roleRetry}, nil
		}
		role.SetAnnotations(map[string]string{createdAnnotation: "true"})
		return reconcile.Result{}, r.c.Update(ctx, role)
	}

	if !controllerutil.ContainsFinalizer(role, cleanupFinalizer) {
		return reconcile.Result{}, nil
	}
	if r.hold.ShouldReleaseWithoutDelete(server) {
		return reconcile.Result{}, r.hold.ReleaseWithoutDelete(ctx, r.c, role, serverName)
	}
	pass, cancel := r.hold.PassContext(ctx, server)
	err := r.drop(pass, server, role.GetUID())
	cancel()
	if err != nil {
		// Counted from the end of the pass, capped at the hold end.
		return reconcile.Result{RequeueAfter: r.hold.RetryAfter(server, roleRetry)}, nil
	}
	controllerutil.RemoveFinalizer(role, cleanupFinalizer)
	return reconcile.Result{}, r.c.Update(ctx, role)
}

// create writes the cleanup record, then creates the role tagged with the
// record's ownership tag (and the namespace, for the tests' queries).
func (r *roleReconciler) create(ctx context.Context, server, role client.Object, name string) error {
	conn, err := connect(ctx, r.c, server)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	owner := ledger.Owner{APIVersion: roleGVK.GroupVersion().String(), Kind: roleGVK.Kind,
		Namespace: role.GetNamespace(), Name: role.GetName(), UID: role.GetUID()}
	_, err = r.ledger.Create(ctx, ledger.Plan{Owner: owner}, newTarget(conn), func(ctx context.Context, tag string) ([]string, error) {
		if _, err := conn.Exec(ctx, "CREATE ROLE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return nil, err
		}
		comment := tag + " ns=" + role.GetNamespace()
		_, err := conn.Exec(ctx, "COMMENT ON ROLE "+pgx.Identifier{name}.Sanitize()+" IS "+quote(comment))
		return []string{name}, err
	})
	return err
}

// drop deletes what the record lists (and anything with its tag) in the
// deployment the Server reaches, then removes the record.
func (r *roleReconciler) drop(ctx context.Context, server client.Object, uid types.UID) error {
	conn, err := connect(ctx, r.c, server)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = r.ledger.Cleanup(ctx, uid, newTarget(conn))
	return err
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ---- fixture ----

const waitLong = 90 * time.Second

func admin(t testing.TB) *pgserver.Server { return testenv.Postgres(t) }

// installCRDs installs Server and Role.
func installCRDs(t testing.TB, c client.Client) {
	t.Helper()
	if err := controlplane.InstallCRDs(context.Background(), c, crd("Server", "servers"), crd("Role", "roles")); err != nil {
		t.Fatal(err)
	}
}

// createServer creates a Secret with the admin credentials (password
// overridden when not empty) and a Server using it.
func createServer(t testing.TB, c client.Client, ns, name, password string) *unstructured.Unstructured {
	t.Helper()
	ctx := context.Background()
	pg := admin(t)
	if password == "" {
		password = pg.Password
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-credentials"},
		Data:       map[string][]byte{"username": []byte(pgserver.AdminUser), "password": []byte(password)},
	}
	if err := c.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	srv := newServer()
	srv.SetNamespace(ns)
	srv.SetName(name)
	srv.Object["spec"] = map[string]interface{}{"host": pg.Host, "port": strconv.Itoa(pg.Port), "secretName": sec.Name}
	if err := c.Create(ctx, srv); err != nil {
		t.Fatal(err)
	}
	return srv
}

func createRoles(t testing.TB, c client.Client, ns, server string, n int) {
	t.Helper()
	for i := range n {
		r := newRole()
		r.SetNamespace(ns)
		r.SetName(fmt.Sprintf("role-%04d", i))
		r.Object["spec"] = map[string]interface{}{"serverName": server}
		if err := c.Create(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

// pgRolesIn lists the PostgreSQL roles tagged with namespace ns.
func pgRolesIn(ctx context.Context, ns string) ([]string, error) {
	conn, err := pgx.Connect(ctx, pgDSN)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT rolname FROM pg_roles WHERE shobj_description(oid, 'pg_authid') LIKE $1 ORDER BY rolname`,
		ledger.TagPrefix+"role:% ns="+ns)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// pgDSN is the admin DSN, set by fixture before any use.
var pgDSN string

// waitPGRoles waits until exactly n roles tagged with ns exist.
func waitPGRoles(t testing.TB, ns string, n int, timeout time.Duration) {
	t.Helper()
	var last int
	err := controlplane.WaitFor(context.Background(), timeout, fmt.Sprintf("%d PostgreSQL roles for namespace %s", n, ns), func(ctx context.Context) (bool, error) {
		got, err := pgRolesIn(ctx, ns)
		if err == nil {
			last = len(got)
		}
		return err == nil && len(got) == n, err
	})
	if err != nil {
		t.Fatalf("%v (last saw %d)", err, last)
	}
}

// fixture is a namespace with a Server, its Secret, a plain ConfigMap and
// n Roles, all created in PostgreSQL and held.
type fixture struct {
	ns     string
	server *unstructured.Unstructured
	secret types.NamespacedName
}

func newFixture(t testing.TB, c client.Client, n int) fixture {
	t.Helper()
	installCRDs(t, c)
	pgDSN = admin(t).DSN()
	ns := testenv.Namespace(t, c)
	srv := createServer(t, c, ns, "pg", "")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}
	if err := c.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	createRoles(t, c, ns, srv.GetName(), n)
	f := fixture{ns: ns, server: srv, secret: types.NamespacedName{Namespace: ns, Name: serverSecretName(srv)}}
	return f
}

// waitReady waits until n roles exist in PostgreSQL and the Server and
// Secret carry the hold finalizer.
func (f fixture) waitReady(t testing.TB, c client.Client, n int) {
	t.Helper()
	waitPGRoles(t, f.ns, n, waitLong)
	f.waitHeld(t, c, true)
}

func (f fixture) waitHeld(t testing.TB, c client.Client, want bool) {
	t.Helper()
	err := controlplane.WaitFor(context.Background(), 30*time.Second, fmt.Sprintf("Server and Secret held=%v", want), func(ctx context.Context) (bool, error) {
		srv := newServer()
		if err := c.Get(ctx, client.ObjectKeyFromObject(f.server), srv); err != nil {
			return false, err
		}
		var sec corev1.Secret
		if err := c.Get(ctx, f.secret, &sec); err != nil {
			return false, err
		}
		return controllerutil.ContainsFinalizer(srv, hold.Finalizer) == want &&
			controllerutil.ContainsFinalizer(&sec, hold.Finalizer) == want, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func deleteNamespace(t testing.TB, c client.Client, ns string) {
	t.Helper()
	if err := c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
}

func waitNamespaceGone(t testing.TB, c client.Client, ns string, timeout time.Duration) {
	t.Helper()
	if err := controlplane.WaitGone(context.Background(), c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, timeout); err != nil {
		t.Fatal(err)
	}
}

// waitSecretReleased waits until the Secret has no hold finalizer (or is
// gone).
func (f fixture) waitSecretReleased(t testing.TB, c client.Client) {
	t.Helper()
	err := controlplane.WaitFor(context.Background(), 30*time.Second, "Secret "+f.secret.String()+" released", func(ctx context.Context) (bool, error) {
		var sec corev1.Secret
		if err := c.Get(ctx, f.secret, &sec); err != nil {
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}
		return !controllerutil.ContainsFinalizer(&sec, hold.Finalizer), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
