package controller_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/examples/postgres/config/crd"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/pgserver"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	testenv.Main(m)
}

const wait = 90 * time.Second

func scheme() *runtime.Scheme {
	s := testenv.Scheme()
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

var (
	crdOnce sync.Once
	crdErr  error // every caller's, not only the first's
)

// world is one running operator on the shared control plane and PostgreSQL.
type world struct {
	t     testing.TB
	c     client.Client
	pg    *pgserver.Server
	admin *pgx.Conn
	recNS string
	store *ledger.ConfigMapStore
	op    *controller.Operator
	// stop stops the operator (once); tests that run several operators
	// one after the other stop the first, or both would act.
	stop func()
}

func start(t testing.TB, o controller.Options) *world {
	t.Helper()
	return startAs(t, o, nil)
}

// startAs runs the operator with the rest config asUser returns for the
// records namespace (nil: the admin config).
func startAs(t testing.TB, o controller.Options, asUser func(recNS string) *rest.Config) *world {
	return startWith(t, o, asUser, nil)
}

// startWith also lets wrap change the manager's client (to count its
// writes, say).
func startWith(t testing.TB, o controller.Options, asUser func(recNS string) *rest.Config, wrap func(client.Client) client.Client) *world {
	t.Helper()
	return startFull(t, o, asUser, wrap, nil)
}

// startFull also lets mgrOpts change the manager's options (its cache, say).
func startFull(t testing.TB, o controller.Options, asUser func(recNS string) *rest.Config, wrap func(client.Client) client.Client, mgrOpts func(*ctrl.Options)) *world {
	t.Helper()
	s := scheme()
	w := &world{t: t, c: testenv.Client(t, s), pg: testenv.Postgres(t)}
	crdOnce.Do(func() {
		crds, err := crd.CRDs()
		if err == nil {
			err = controlplane.InstallCRDs(context.Background(), w.c, crds...)
		}
		crdErr = err
	})
	if crdErr != nil {
		t.Fatal(crdErr)
	}
	w.recNS = o.RecordsNamespace
	if w.recNS == "" {
		w.recNS = testenv.Namespace(t, w.c)
	}
	var err error
	if w.store, err = ledger.NewConfigMapStore(w.c, w.recNS); err != nil {
		t.Fatal(err)
	}
	if w.admin, err = pgx.Connect(t.Context(), w.pg.DSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.admin.Close(context.Background()) })

	newClient := func(cfg *rest.Config, opts client.Options) (client.Client, error) {
		c, err := client.New(cfg, opts)
		if err != nil || wrap == nil {
			return c, err
		}
		return wrap(c), nil
	}
	cfg := testenv.ControlPlane(t).Config
	if asUser != nil {
		cfg = asUser(w.recNS)
	}
	mo := ctrl.Options{
		NewClient:              newClient,
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if mgrOpts != nil {
		mgrOpts(&mo)
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		t.Fatal(err)
	}
	o.RecordsNamespace = w.recNS
	o.SkipNameValidation = true
	o.PoolName = "test-" + w.recNS
	if o.RetryInterval == 0 {
		o.RetryInterval = time.Second
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 2 * time.Second
	}
	if w.op, err = controller.Setup(mgr, o); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	w.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
			_ = w.op.Pool.Close()
		})
	}
	t.Cleanup(w.stop)
	return w
}

// server creates a namespace with a credential Secret and a Server.
func (w *world) server() (ns string) {
	w.t.Helper()
	return w.serverAt(w.pg.Host, w.pg.Port)
}

// namespace creates a namespace for the test.
func (w *world) namespace() string {
	w.t.Helper()
	return testenv.Namespace(w.t, w.c)
}

// serverBehindProxy is server with a fault proxy between the Server and
// PostgreSQL.
func (w *world) serverBehindProxy() (ns string, proxy *faultinject.Proxy) {
	w.t.Helper()
	proxy, err := faultinject.NewProxy(w.pg.Addr())
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = proxy.Close() })
	host, port, err := net.SplitHostPort(proxy.Addr())
	if err != nil {
		w.t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		w.t.Fatal(err)
	}
	return w.serverAt(host, p), proxy
}

// serverAt is server with the Server pointing at host:port (a proxy, say).
func (w *world) serverAt(host string, port int) (ns string) {
	w.t.Helper()
	ns = w.namespace()
	w.serverInAt(ns, host, port)
	return ns
}

// serverIn creates the credential Secret and the Server "pg" in ns.
func (w *world) serverIn(ns string) {
	w.t.Helper()
	w.serverInAt(ns, w.pg.Host, w.pg.Port)
}

func (w *world) serverInAt(ns, host string, port int) {
	w.t.Helper()
	w.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-admin"},
		Data:       map[string][]byte{"username": []byte(pgserver.AdminUser), "password": []byte(w.pg.Password)},
	})
	w.create(&v1alpha1.Server{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"},
		Spec: v1alpha1.ServerSpec{
			Host: host, Port: int32(port), SSLMode: v1alpha1.SSLModeDisable,
			CredentialsSecretRef: v1alpha1.CredentialsSecretReference{Name: "pg-admin"},
		},
	})
}

func (w *world) create(obj client.Object) {
	w.t.Helper()
	if err := w.c.Create(w.t.Context(), obj); err != nil {
		w.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func role(ns, name, roleName string) *v1alpha1.Role {
	return &v1alpha1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.RoleSpec{ServerRef: v1alpha1.ServerReference{Name: "pg"}, RoleName: roleName, DeletionPolicy: v1alpha1.DeletionPolicyDelete},
	}
}

func database(ns, name, dbName, owner string) *v1alpha1.Database {
	return &v1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.DatabaseSpec{ServerRef: v1alpha1.ServerReference{Name: "pg"}, DatabaseName: dbName, Owner: owner, DeletionPolicy: v1alpha1.DeletionPolicyDelete},
	}
}

func conditions(obj client.Object) []metav1.Condition {
	switch o := obj.(type) {
	case *v1alpha1.Role:
		return o.Status.Conditions
	case *v1alpha1.Database:
		return o.Status.Conditions
	case *v1alpha1.Server:
		return o.Status.Conditions
	}
	return nil
}

// waitCondition waits until obj's condition typ has status and reason.
func (w *world) waitCondition(obj client.Object, typ string, status metav1.ConditionStatus, reason string) {
	w.t.Helper()
	err := controlplane.WaitFor(w.t.Context(), wait, fmt.Sprintf("%T %s %s=%s/%s", obj, obj.GetName(), typ, status, reason), func(ctx context.Context) (bool, error) {
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(conditions(obj), typ)
		return c != nil && c.Status == status && (reason == "" || c.Reason == reason), nil
	})
	if err != nil {
		w.t.Fatalf("%v; conditions: %+v", err, conditions(obj))
	}
}

func (w *world) ready(obj client.Object) {
	w.t.Helper()
	w.waitCondition(obj, lifecycle.ConditionReady, metav1.ConditionTrue, "")
}

func tagOf(obj client.Object) string {
	kind := "role"
	if _, ok := obj.(*v1alpha1.Database); ok {
		kind = "database"
	}
	return ledger.TagPrefix + kind + ":" + string(obj.GetUID())
}

func (w *world) roleTag(name string) (string, bool) {
	w.t.Helper()
	r, ok, err := catalog.ObserveRole(w.t.Context(), w.admin, name)
	if err != nil {
		w.t.Fatal(err)
	}
	return r.Tag, ok
}

func (w *world) database(name string) (catalog.Database, bool) {
	w.t.Helper()
	d, ok, err := catalog.ObserveDatabase(w.t.Context(), w.admin, name)
	if err != nil {
		w.t.Fatal(err)
	}
	return d, ok
}

func (w *world) waitGoneFromPostgres(kind, name string) {
	w.t.Helper()
	err := controlplane.WaitFor(w.t.Context(), wait, kind+" "+name+" dropped", func(ctx context.Context) (bool, error) {
		if kind == "role" {
			_, ok, err := catalog.ObserveRole(ctx, w.admin, name)
			return !ok, err
		}
		_, ok, err := catalog.ObserveDatabase(ctx, w.admin, name)
		return !ok, err
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) waitGone(obj client.Object) {
	w.t.Helper()
	if err := controlplane.WaitGone(w.t.Context(), w.c, obj, wait); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) record(uid string) *ledger.Record {
	w.t.Helper()
	r, err := w.store.Get(w.t.Context(), typesUID(uid))
	if errors.Is(err, ledger.ErrNotFound) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// leaks lists every tagged role and database in PostgreSQL whose owner is
// gone from the cluster and that no record of this operator covers.
func (w *world) leaks() []string {
	w.t.Helper()
	ctx := w.t.Context()
	rows, err := w.admin.Query(ctx, `
		SELECT 'role', r.rolname, d.description FROM pg_roles r JOIN pg_shdescription d ON d.objoid = r.oid AND d.classoid = 'pg_authid'::regclass WHERE d.description LIKE 'finale:%'
		UNION ALL
		SELECT 'database', b.datname, d.description FROM pg_database b JOIN pg_shdescription d ON d.objoid = b.oid AND d.classoid = 'pg_database'::regclass WHERE d.description LIKE 'finale:%'`)
	if err != nil {
		w.t.Fatal(err)
	}
	type tagged struct{ kind, name, tag string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tagged, error) {
		var t tagged
		return t, r.Scan(&t.kind, &t.name, &t.tag)
	})
	if err != nil {
		w.t.Fatal(err)
	}
	live := map[string]bool{}
	var roles v1alpha1.RoleList
	var dbs v1alpha1.DatabaseList
	if err := w.c.List(ctx, &roles); err != nil {
		w.t.Fatal(err)
	}
	if err := w.c.List(ctx, &dbs); err != nil {
		w.t.Fatal(err)
	}
	for i := range roles.Items {
		live[tagOf(&roles.Items[i])] = true
	}
	for i := range dbs.Items {
		live[tagOf(&dbs.Items[i])] = true
	}
	var out []string
	for _, f := range found {
		uid := f.tag[strings.LastIndex(f.tag, ":")+1:]
		if live[f.tag] || w.record(uid) != nil {
			continue
		}
		out = append(out, f.kind+" "+f.name+" ("+f.tag+")")
	}
	return out
}

func pgxConnectAs(t *testing.T, w *world, user, password, db string) (*pgx.Conn, error) {
	t.Helper()
	cfg, err := pgx.ParseConfig(w.pg.DSNVia(w.pg.Addr(), db))
	if err != nil {
		return nil, err
	}
	cfg.User, cfg.Password = user, password
	return pgx.ConnectConfig(t.Context(), cfg)
}
