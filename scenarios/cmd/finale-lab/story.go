package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/scenarios"
	"github.com/finale-dev/finale/scenarios/internal/operator"
)

const (
	demoNamespace    = "demo"
	recordsNamespace = "finale-system"
	demoRoles        = 20
	demoDatabases    = 5
	extraRoles       = 10
	stepTimeout      = 3 * time.Minute
	// callTimeout is what turns a frozen connection into a Transport error
	// (and an eviction) quickly enough to watch, and outlasts a CREATE
	// DATABASE on a loaded machine (controller.StatementTimeout says why).
	callTimeout = 5 * time.Second
	// The sweeper's settle window, shortened so that the demo's leaked
	// role is swept within seconds rather than the default 6 minutes
	// (--sweep-settle 5m plus --sweep-clock-skew 1m). These are the
	// operator's documented flags, --sweep-settle=5s --sweep-clock-skew=1s
	// --sweep-interval=1s, not a demo-only code path; the demo says so.
	sweepSettle, sweepClockSkew, sweepInterval = 5 * time.Second, time.Second, time.Second
)

// step is one row of the closing table.
type step struct {
	name                     string
	created, deleted, leaked int
	took                     time.Duration
	ok                       bool
	note                     string
}

// story is the demo proper: the reference operator on the real stack, with
// faults, narrated. It returns an error when any guarantee failed.
type story struct {
	out    io.Writer
	cp     *controlplane.ControlPlane
	pg     *pgserver.Server
	ca     []byte // the PEM certificate of the CA that issued pg's
	proxy  *faultinject.Proxy
	c      client.Client
	db     *pgx.Conn
	scheme *runtime.Scheme
	steps  []step
	uids   map[string]bool // of every object the demo created
}

// runStory runs the demo on cp, which has the operator's CRDs (startStack),
// and pg.
func runStory(ctx context.Context, out io.Writer, cp *controlplane.ControlPlane, pg *pgserver.Server, ca []byte) error {
	// The operator's own log goes to a file: the faults make it log errors
	// on purpose, and the narration says what matters.
	logFile := filepath.Join(cp.Dir(), "operator.log")
	lf, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer func() { _ = lf.Close() }() // the operator's log; nothing to do if it fails
	ctrllog.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(lf, prefix, args) }, funcr.Options{}))
	fmt.Fprintf(out, "operator log:  %s\n", logFile)

	s := &story{out: out, cp: cp, pg: pg, ca: ca, scheme: runtime.NewScheme(), uids: map[string]bool{}}
	utilruntime.Must(clientgoscheme.AddToScheme(s.scheme))
	utilruntime.Must(v1alpha1.AddToScheme(s.scheme))
	if s.c, err = client.New(cp.Config, client.Options{Scheme: s.scheme}); err != nil {
		return err
	}
	if s.db, err = pgx.Connect(ctx, pg.DSN()); err != nil {
		return err
	}
	defer func() { _ = s.db.Close(context.Background()) }() // the server is stopped next anyway
	if s.proxy, err = faultinject.NewProxy(pg.Addr()); err != nil {
		return err
	}
	defer func() { _ = s.proxy.Close() }() // test harness; its connections die with the server

	for _, ns := range []string{recordsNamespace, demoNamespace} {
		if err := s.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}

	stop, err := s.startOperator(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { stop() }()

	for _, f := range []func(context.Context) (step, error){s.createAll, s.poisoned} {
		if err := s.run(ctx, f); err != nil {
			return err
		}
	}
	stop()
	stop, err = s.crashDuringCreates(ctx)
	if stop == nil {
		stop = func() {}
	}
	if err != nil {
		return err
	}
	stop, err = s.finalizerRemovedByHand(ctx, stop)
	if stop == nil {
		stop = func() {}
	}
	if err != nil {
		return err
	}
	if err := s.run(ctx, s.deleteNamespace); err != nil {
		return err
	}
	return s.table()
}

func (s *story) run(ctx context.Context, f func(context.Context) (step, error)) error {
	t0 := time.Now()
	st, err := f(ctx)
	st.took = time.Since(t0)
	s.steps = append(s.steps, st)
	return err
}

func (s *story) say(format string, args ...any) { fmt.Fprintf(s.out, format+"\n", args...) }

// startOperator runs the operator in-process; script, when set, faults its
// API client. The returned stop drops all its in-memory state, the client
// pool included, as a crash would.
func (s *story) startOperator(ctx context.Context, script *faultinject.Script) (func(), error) {
	r, err := operator.Start(ctx, operator.Options{
		Config: s.cp.Config, Scheme: s.scheme, Script: script,
		Operator: controller.Options{RecordsNamespace: recordsNamespace, CallTimeout: callTimeout,
			SweepSettle: sweepSettle, SweepClockSkew: sweepClockSkew, SweepInterval: sweepInterval},
	})
	if err != nil {
		return nil, err
	}
	return func() {
		if err := r.Stop(); err != nil {
			s.say("operator stopped with: %v", err)
		}
	}, nil
}

func (s *story) createAll(ctx context.Context) (step, error) {
	st := step{name: "1. create a Server, its Secret, 20 Roles, 5 Databases"}
	s.say("\n== %s", st.name)
	host, port, _ := strings.Cut(s.proxy.Addr(), ":")
	p, _ := strconv.Atoi(port)
	objs := []client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "pg-admin"},
			// The server's CA beside the login, under the key a Server
			// reads by default: the Server below is all defaults, so it
			// verifies the server (verify-full) and the sweeper may use it.
			StringData: map[string]string{"username": pgserver.AdminUser, "password": s.pg.Password, v1alpha1.DefaultCAKey: string(s.ca)},
		},
		&v1alpha1.Server{
			ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "pg"},
			Spec: v1alpha1.ServerSpec{
				Host: host, Port: int32(p),
				CredentialsSecretRef: v1alpha1.CredentialsSecretReference{Name: "pg-admin"},
			},
		},
	}
	for i := range demoRoles {
		objs = append(objs, role(fmt.Sprintf("app-%02d", i)))
	}
	for i := range demoDatabases {
		objs = append(objs, &v1alpha1.Database{
			ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: fmt.Sprintf("db-%d", i)},
			Spec: v1alpha1.DatabaseSpec{
				ServerRef: v1alpha1.ServerReference{Name: "pg"}, DatabaseName: fmt.Sprintf("demo_db_%d", i),
				DeletionPolicy: v1alpha1.DeletionPolicyDelete,
			},
		})
	}
	s.say("proxy %s -> PostgreSQL %s (TLS, a certificate for 127.0.0.1 from the demo's CA); the Server points at the proxy and, by default, verifies the certificate", s.proxy.Addr(), s.pg.Addr())
	for _, o := range objs {
		if err := s.create(ctx, o); err != nil {
			return st, err
		}
	}
	if err := s.waitReady(ctx, demoRoles, demoDatabases); err != nil {
		return st, err
	}
	roles, dbs, err := s.tagged(ctx)
	if err != nil {
		return st, err
	}
	s.say("in PostgreSQL: %d roles and %d databases carry a finale ownership tag", roles, dbs)
	st.created = roles + dbs
	st.ok = roles == demoRoles && dbs == demoDatabases
	return st, nil
}

func role(name string) *v1alpha1.Role {
	return &v1alpha1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: name},
		Spec: v1alpha1.RoleSpec{
			ServerRef: v1alpha1.ServerReference{Name: "pg"}, RoleName: "demo_" + strings.ReplaceAll(name, "-", "_"),
			Login: true, Password: &v1alpha1.RolePassword{Generate: &v1alpha1.GeneratedPassword{}},
		},
	}
}

func (s *story) poisoned(ctx context.Context) (step, error) {
	st := step{name: "2. freeze the operator's connection, delete a Database"}
	s.say("\n== %s", st.name)
	before := counter("finale_clientpool_evictions_total")
	frozen := s.proxy.Freeze()
	s.say("froze %d established connection(s); new connections still work (the seed's half-broken client)", frozen)
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "db-0"}}
	if err := controlplane.DeleteAndWait(ctx, s.c, db, stepTimeout); err != nil {
		return st, err
	}
	s.proxy.Thaw()
	evicted := counter("finale_clientpool_evictions_total") - before
	_, dbs, err := s.tagged(ctx)
	if err != nil {
		return st, err
	}
	s.say("Database db-0 deleted; %.0f cached connection(s) evicted by the pool's policy; %d tagged databases left", evicted, dbs)
	st.deleted = demoDatabases - dbs
	st.ok = evicted >= 1 && dbs == demoDatabases-1
	if !st.ok {
		st.note = "no eviction seen"
	}
	return st, nil
}

// crashDuringCreates stops the operator right after its fifth record write,
// restarts it clean and checks that every Role exists exactly once.
func (s *story) crashDuringCreates(ctx context.Context) (func(), error) {
	st := step{name: "3. crash the operator while it creates 10 more Roles"}
	s.say("\n== %s", st.name)
	t0 := time.Now()
	script := faultinject.NewScript(faultinject.Fault{Verb: faultinject.Create, Kind: "ConfigMap", Nth: 5, Crash: true})
	stop, err := s.startOperator(ctx, script)
	if err != nil {
		return nil, err
	}
	for i := range extraRoles {
		if err := s.create(ctx, role(fmt.Sprintf("extra-%02d", i))); err != nil {
			stop()
			return nil, err
		}
	}
	if err := controlplane.WaitFor(ctx, stepTimeout, "the scripted crash", func(context.Context) (bool, error) {
		return script.Crashed(), nil
	}); err != nil {
		stop()
		return nil, err
	}
	stop()
	s.say("operator crashed right after its 5th cleanup-record write (all in-memory state dropped); restarting it")
	stop, err = s.startOperator(ctx, nil)
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, demoRoles+extraRoles, demoDatabases-1); err != nil {
		return stop, err
	}
	roles, _, err := s.tagged(ctx)
	if err != nil {
		return stop, err
	}
	leaked, err := s.leaked(ctx)
	if err != nil {
		return stop, err
	}
	s.say("after the restart: %d tagged roles for %d Role objects, %d leaked", roles, demoRoles+extraRoles, leaked)
	st.created, st.leaked = roles-demoRoles, leaked
	st.ok = roles == demoRoles+extraRoles && leaked == 0
	st.took = time.Since(t0)
	s.steps = append(s.steps, st)
	return stop, nil
}

// finalizerRemovedByHand stops the operator (stop), deletes a Role and
// removes its finalizer by hand, as an admin forcing a deletion would, so
// its role and its cleanup record outlive it; restarted, the operator's
// sweeper drops the role through the record's own Server, which verifies
// the server's certificate (the Server's default), and removes the record.
// It returns the restarted operator's stop.
func (s *story) finalizerRemovedByHand(ctx context.Context, stop func()) (func(), error) {
	st := step{name: "4. remove a Role's finalizer by hand while the operator is down"}
	s.say("\n== %s", st.name)
	t0 := time.Now()
	stop()
	r := &v1alpha1.Role{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "app-00"}, r); err != nil {
		return nil, err
	}
	if err := s.c.Delete(ctx, r); err != nil {
		return nil, err
	}
	// Read again: the delete changed its resourceVersion.
	if err := s.c.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
		return nil, err
	}
	r.SetFinalizers(nil)
	if err := s.c.Update(ctx, r); client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	if err := controlplane.WaitGone(ctx, s.c, r, stepTimeout); err != nil {
		return nil, err
	}
	if !s.roleExists(ctx, r.Spec.RoleName) {
		return nil, fmt.Errorf("role %s went with its finalizer; the step shows nothing", r.Spec.RoleName)
	}
	s.say("Role app-00 deleted with its finalizer removed by hand: role %s is still in PostgreSQL, its cleanup record in %s", r.Spec.RoleName, recordsNamespace)
	s.say("restarting the operator; its sweeper settles %s (--sweep-settle=%s --sweep-clock-skew=%s; the defaults are 5m and 1m, shortened so that the demo is short)",
		sweepSettle+sweepClockSkew, sweepSettle, sweepClockSkew)
	stop, err := s.startOperator(ctx, nil)
	if err != nil {
		return nil, err
	}
	err = controlplane.WaitFor(ctx, stepTimeout, "the sweeper to drop role "+r.Spec.RoleName, func(ctx context.Context) (bool, error) {
		var cm corev1.ConfigMap
		err := s.c.Get(ctx, client.ObjectKey{Namespace: recordsNamespace, Name: ledger.ConfigMapName(r.UID)}, &cm)
		if client.IgnoreNotFound(err) != nil {
			return false, err
		}
		return err != nil && !s.roleExists(ctx, r.Spec.RoleName), nil
	})
	swept := err == nil
	leaked, lerr := s.leaked(ctx)
	if lerr != nil {
		return stop, lerr
	}
	if swept {
		s.say("swept %s after %s: the role dropped through the Role's own Server (verify-full), its record removed; leaked %d",
			r.Spec.RoleName, time.Since(t0).Round(100*time.Millisecond), leaked)
		st.deleted = 1
	}
	st.leaked = leaked
	st.ok = swept && leaked == 0
	if !swept {
		st.note = "the leaked role was not swept"
	}
	st.took = time.Since(t0)
	s.steps = append(s.steps, st)
	return stop, nil
}

// roleExists reports whether PostgreSQL has the role (false on a failed
// query: the caller waits again).
func (s *story) roleExists(ctx context.Context, name string) bool {
	var n int
	err := s.db.QueryRow(ctx, "SELECT count(*) FROM pg_roles WHERE rolname = $1", name).Scan(&n)
	return err == nil && n == 1
}

func (s *story) deleteNamespace(ctx context.Context) (step, error) {
	st := step{name: "5. delete the Secret, the Server, then the namespace"}
	s.say("\n== %s", st.name)
	rolesBefore, dbsBefore, err := s.tagged(ctx)
	if err != nil {
		return st, err
	}
	// The namespace controller deletes in no useful order; to show the hold
	// every time, the Secret and the Server go first, as the worst order
	// would have it, then the namespace.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "pg-admin"}}
	server := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "pg"}}
	for _, o := range []client.Object{secret, server} {
		if err := s.c.Delete(ctx, o); err != nil {
			return st, err
		}
	}
	held := controlplane.WaitFor(ctx, stepTimeout, "the Secret and the Server to be held", func(ctx context.Context) (bool, error) {
		for _, o := range []client.Object{secret, server} {
			if err := s.c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return false, err // gone while Roles still need it: the hold failed
			}
			if o.GetDeletionTimestamp() == nil || !slices.Contains(o.GetFinalizers(), hold.Finalizer) {
				return false, nil
			}
		}
		return true, nil
	}) == nil
	if held {
		s.say("deleted the Secret and the Server first: both are terminating and held (%s) while %d Roles and %d Databases still need them", hold.Finalizer, rolesBefore, dbsBefore)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}
	if err := s.c.Delete(ctx, ns); err != nil {
		return st, err
	}
	err = controlplane.WaitFor(ctx, stepTimeout, "namespace "+demoNamespace+" to be gone", func(ctx context.Context) (bool, error) {
		err := s.c.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		return st, err
	}
	roles, dbs, err := s.tagged(ctx)
	if err != nil {
		return st, err
	}
	leaked, err := s.leaked(ctx)
	if err != nil {
		return st, err
	}
	s.say("namespace gone; tagged roles %d -> %d, databases %d -> %d; leaked %d", rolesBefore, roles, dbsBefore, dbs, leaked)
	st.deleted = rolesBefore - roles + dbsBefore - dbs
	st.leaked = leaked + roles + dbs
	st.ok = held && st.leaked == 0
	if !held {
		st.note = "the hold was not observed"
	}
	return st, nil
}

// waitReady waits until the namespace has the given numbers of Ready Roles
// and Databases.
func (s *story) waitReady(ctx context.Context, roles, dbs int) error {
	return controlplane.WaitFor(ctx, stepTimeout, fmt.Sprintf("%d Roles and %d Databases Ready", roles, dbs), func(ctx context.Context) (bool, error) {
		var rl v1alpha1.RoleList
		var dl v1alpha1.DatabaseList
		if err := s.c.List(ctx, &rl, client.InNamespace(demoNamespace)); err != nil {
			return false, err
		}
		if err := s.c.List(ctx, &dl, client.InNamespace(demoNamespace)); err != nil {
			return false, err
		}
		n, m := 0, 0
		for _, r := range rl.Items {
			if ready(r.Status.Conditions) {
				n++
			}
		}
		for _, d := range dl.Items {
			if ready(d.Status.Conditions) {
				m++
			}
		}
		return n == roles && m == dbs, nil
	})
}

func ready(cs []metav1.Condition) bool {
	for _, c := range cs {
		if c.Type == v1alpha1.ConditionReady {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// scope is what the demo created: PostgreSQL names it chose, and the UIDs of
// its objects (a database half-way through its create has a pending name).
func (s *story) scope() scenarios.Scope {
	return scenarios.Scope{NamePrefix: "demo_", OwnerUIDs: s.uids}
}

// tagged counts the roles and databases in PostgreSQL that carry a finale
// ownership tag.
func (s *story) tagged(ctx context.Context) (roles, dbs int, err error) {
	ts, err := scenarios.ListTagged(ctx, s.db, s.scope())
	for _, t := range ts {
		if t.Kind == "role" {
			roles++
		} else {
			dbs++
		}
	}
	return roles, dbs, err
}

// leaked counts tagged objects in PostgreSQL with neither a live owner
// object nor a cleanup record: the "no leak" invariant.
func (s *story) leaked(ctx context.Context) (int, error) {
	v, err := scenarios.CheckNoLeak(ctx, s.db, s.c, recordsNamespace, s.scope())
	return len(v), err
}

// create creates obj and remembers its UID for the leak checks.
func (s *story) create(ctx context.Context, obj client.Object) error {
	if err := s.c.Create(ctx, obj); err != nil {
		return err
	}
	s.uids[string(obj.GetUID())] = true
	return nil
}

// counter sums a counter over all its label values in controller-runtime's
// registry.
func counter(name string) float64 {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func (s *story) table() error {
	s.say("")
	tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tcreated\tdeleted\tleaked\ttime\tguarantee")
	var failed []string
	for _, st := range s.steps {
		verdict := "held"
		if !st.ok {
			verdict = "FAILED " + st.note
			failed = append(failed, st.name)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", st.name, st.created, st.deleted, st.leaked, st.took.Round(100*time.Millisecond), verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("guarantees failed in: %s", strings.Join(failed, "; "))
	}
	s.say("\nevery guarantee held: deletions finished, nothing leaked, nothing duplicated")
	return nil
}
