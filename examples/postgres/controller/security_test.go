package controller_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/lifecycle"
)

// loopbackListener accepts on 127.0.0.1 and hands each connection to
// serve; it counts what it accepted and closes everything at cleanup.
func loopbackListener(t *testing.T, serve func(net.Conn)) (port int, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = &atomic.Int64{}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().(*net.TCPAddr).Port, accepted
}

// closedPort is a loopback port nothing listens on (it was bound, then
// released).
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// userView is what a namespace's user can read about a Server and a Role
// that references it: conditions without their timestamps, and Events.
type userView struct {
	Server, Role             []viewCondition
	ServerEvents, RoleEvents []viewEvent
	// HoldEvents are the Server's Events once it is deleted and held.
	HoldEvents []viewEvent
}

var clockTime = regexp.MustCompile(`[0-9]{2}:[0-9]{2}:[0-9]{2}Z`)

type viewCondition struct{ Type, Status, Reason, Message string }

type viewEvent struct{ Type, Reason, Note string }

func viewOf(conds []metav1.Condition) []viewCondition {
	out := make([]viewCondition, 0, len(conds))
	for _, c := range conds {
		out = append(out, viewCondition{c.Type, string(c.Status), c.Reason, c.Message})
	}
	slices.SortFunc(out, func(a, b viewCondition) int {
		if a.Type < b.Type {
			return -1
		}
		if a.Type > b.Type {
			return 1
		}
		return 0
	})
	return out
}

// events lists the Events about the object named name of kind in ns, as
// the user sees them (type, reason, note), sorted and without repeats.
func (w *world) events(ns, kind, name string) []viewEvent {
	w.t.Helper()
	var l eventsv1.EventList
	if err := w.c.List(w.t.Context(), &l, client.InNamespace(ns)); err != nil {
		w.t.Fatal(err)
	}
	seen := map[viewEvent]bool{}
	var out []viewEvent
	for _, e := range l.Items {
		// Whether a Role first waited for its Server's hold depends on
		// which controller ran first, not on the Server's address.
		if e.Regarding.Kind != kind || e.Regarding.Name != name || e.Reason == lifecycle.ReasonWaitingForHold {
			continue
		}
		v := viewEvent{e.Type, e.Reason, e.Note}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b viewEvent) int {
		switch {
		case a.Reason+a.Note < b.Reason+b.Note:
			return -1
		case a.Reason+a.Note > b.Reason+b.Note:
			return 1
		}
		return 0
	})
	return out
}

// waitEvent waits until an Event of reason is about kind/name in ns.
func (w *world) waitEvent(ns, kind, name, reason string) {
	w.t.Helper()
	err := controlplane.WaitFor(w.t.Context(), wait, fmt.Sprintf("%s Event about %s %s/%s", reason, kind, ns, name), func(context.Context) (bool, error) {
		for _, e := range w.events(ns, kind, name) {
			if e.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

// A Server's status and Events are no port scanner: pointed at a closed
// loopback port, at an open port that speaks another protocol, and at a
// listener that accepts and never answers, a Server, a Role that
// references it and their Events read exactly the same to the namespace's
// user (class and constant message only); and once the Server is deleted,
// the hold's Event is the same for all three too.
func TestServerStatusTellsNoPortsApart(t *testing.T) {
	w := start(t, controller.Options{HoldTimeout: time.Minute})
	banner, _ := loopbackListener(t, func(c net.Conn) {
		_, _ = io.WriteString(c, "SSH-2.0-OpenSSH_9.6\r\n")
		_ = c.Close()
	})
	silent, silentAccepted := loopbackListener(t, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c) // reads what pgx sends, never answers
	})
	cases := []struct {
		name string
		port int
	}{
		{"closed port", closedPort(t)},
		{"open port, another protocol", banner},
		{"accepts and never replies", silent},
	}
	views := map[string]userView{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := w.serverAt("127.0.0.1", tc.port)
			r := role(ns, "r", pgtarget.RandomName("oracle_"))
			w.create(r)
			srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}}
			w.waitCondition(srv, lifecycle.ConditionReady, metav1.ConditionFalse, controller.ReasonConnectFailed)
			// The Role waits for the Server's hold first; then it fails to
			// connect.
			err := controlplane.WaitFor(t.Context(), wait, "Role r fails to connect", func(ctx context.Context) (bool, error) {
				if err := w.c.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
					return false, err
				}
				c := meta.FindStatusCondition(r.Status.Conditions, lifecycle.ConditionSynced)
				return c != nil && c.Status == metav1.ConditionFalse && c.Reason != lifecycle.ReasonWaitingForHold, nil
			})
			if err != nil {
				t.Fatalf("%v; conditions %+v", err, r.Status.Conditions)
			}
			w.waitEvent(ns, "Server", "pg", controller.ReasonConnectFailed)
			w.waitEvent(ns, "Role", "r", meta.FindStatusCondition(r.Status.Conditions, lifecycle.ConditionSynced).Reason)
			ready := meta.FindStatusCondition(srv.Status.Conditions, lifecycle.ConditionReady)
			took := ready.LastTransitionTime.Sub(srv.CreationTimestamp.Time)
			t.Logf("first failure %s after creation; Server says %q", took, ready.Message)
			// Nor is the time to the first failure a clue: every failed
			// connection takes the connect timeout (2 s in these tests;
			// condition times have a resolution of a second).
			if took < time.Second {
				t.Errorf("the first failure came %s after creation: a closed port answers faster than a silent address", took)
			}
			v := userView{
				Server: viewOf(srv.Status.Conditions), Role: viewOf(r.Status.Conditions),
				ServerEvents: w.events(ns, "Server", "pg"), RoleEvents: w.events(ns, "Role", "r"),
			}

			// Deleted, the Server is held for the Role, and the hold's
			// access check fails the same way.
			if err := w.c.Delete(t.Context(), srv); err != nil {
				t.Fatal(err)
			}
			// Both Events of the hold's first look: the recorder writes
			// them in the background, so one may land before the other.
			w.waitEvent(ns, "Server", "pg", hold.ReasonHolding)
			w.waitEvent(ns, "Server", "pg", hold.ReasonAccessNotReady)
			v.HoldEvents = w.events(ns, "Server", "pg")
			for i := range v.HoldEvents {
				// The hold's end is the user's own deletion time plus the
				// timeout: it tells deletions apart, not addresses.
				v.HoldEvents[i].Note = clockTime.ReplaceAllString(v.HoldEvents[i].Note, "hh:mm:ssZ")
			}
			views[tc.name] = v
		})
	}
	if silentAccepted.Load() == 0 {
		t.Fatal("the silent listener was never dialled; the test proves nothing")
	}
	first := views[cases[0].name]
	if got := first.Server; len(got) == 0 || got[0].Message != controller.MessageUnreachable {
		t.Errorf("Server conditions %+v, want the constant %q", got, controller.MessageUnreachable)
	}
	parts := map[string]func(userView) any{
		"the Server's conditions and Events": func(v userView) any { return []any{v.Server, v.ServerEvents} },
		"the held Server's Events (hold)":    func(v userView) any { return v.HoldEvents },
		// lifecycle writes these: its messages carry the class and a
		// constant message.
		"the Role's conditions and Events (lifecycle)": func(v userView) any { return []any{v.Role, v.RoleEvents} },
	}
	for part, of := range parts {
		t.Run(part, func(t *testing.T) {
			for _, tc := range cases[1:] {
				if diff := cmp.Diff(of(first), of(views[tc.name])); diff != "" {
					t.Errorf("a user tells %q from %q apart (-%s +%s):\n%s", cases[0].name, tc.name, cases[0].name, tc.name, diff)
				}
			}
		})
	}
}

// The admin's allow-list refuses a Server elsewhere with a constant
// condition, on the Server and on a Role that references it, and nothing
// dials it.
func TestServerOutsideAllowListIsRefusedAndNeverDialled(t *testing.T) {
	w := start(t, controller.Options{AllowedServers: []string{"db.example.invalid", "10.20.0.0/16"}})
	port, accepted := loopbackListener(t, func(c net.Conn) { _ = c.Close() })
	for _, host := range []string{"127.0.0.1", "localhost"} {
		t.Run(host, func(t *testing.T) {
			ns := w.serverAt(host, port)
			r := role(ns, "r", pgtarget.RandomName("refused_"))
			w.create(r)
			srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}}
			w.waitCondition(srv, lifecycle.ConditionReady, metav1.ConditionFalse, controller.ReasonServerNotAllowed)
			w.waitCondition(r, lifecycle.ConditionSynced, metav1.ConditionFalse, controller.ReasonServerNotAllowed)
			want := fmt.Sprintf(controller.MessageServerNotAllowed, host)
			for what, conds := range map[string][]metav1.Condition{"Server": srv.Status.Conditions, "Role": r.Status.Conditions} {
				typ := lifecycle.ConditionReady
				if what == "Role" {
					typ = lifecycle.ConditionSynced
				}
				if c := meta.FindStatusCondition(conds, typ); c == nil || c.Message != want {
					t.Errorf("%s %s = %+v, want message %q", what, typ, c, want)
				}
			}
			w.waitEvent(ns, "Server", "pg", controller.ReasonServerNotAllowed)
		})
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the refused address was dialled %d times", n)
	}
}

// Setup checks the allow-list in the constructor: a malformed entry is an
// error that names it, before anything runs.
func TestSetupRefusesMalformedAllowList(t *testing.T) {
	mgr, err := ctrl.NewManager(testenv.ControlPlane(t).Config, ctrl.Options{Scheme: scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = controller.Setup(mgr, controller.Options{RecordsNamespace: "x", AllowedServers: []string{"10.0.0.0/33"}, SkipNameValidation: true})
	if err == nil {
		t.Fatal("Setup accepted the allow-list entry 10.0.0.0/33")
	}
	_, err = controller.Setup(mgr, controller.Options{RecordsNamespace: "x", SweepTrustedHosts: []string{"010.0.0.1:5432"}, SkipNameValidation: true})
	if err == nil || !strings.Contains(err.Error(), `sweep trusted host "010.0.0.1:5432"`) {
		t.Fatalf("Setup with the trusted host 010.0.0.1:5432 = %v, want an error naming it", err)
	}
	// A host without a port would trust every port of it: refused, with how to write it, not widened or narrowed.
	_, err = controller.Setup(mgr, controller.Options{RecordsNamespace: "x", SweepTrustedHosts: []string{"127.0.0.1"}, SkipNameValidation: true})
	if err == nil || !strings.Contains(err.Error(), `sweep trusted host "127.0.0.1" has no port: write host:port`) {
		t.Fatalf("Setup with the trusted host 127.0.0.1 (no port) = %v, want an error saying to add the port", err)
	}
}

// informerKinds records the example object of every informer a manager's
// cache creates.
type informerKinds struct {
	mu    sync.Mutex
	kinds []string
}

func (k *informerKinds) newInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
	name := fmt.Sprintf("%T", obj)
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		name += "(" + m.Kind + ")"
	}
	k.mu.Lock()
	k.kinds = append(k.kinds, name)
	k.mu.Unlock()
	return toolscache.NewSharedIndexInformer(lw, obj, resync, idx)
}

func (k *informerKinds) list() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.kinds)
}

// The operator's cache holds no Secret's data: with nothing but Setup's
// code deciding (no cache options), a Server with its credential Secret, a
// Role with a generated password and one with a password Secret, all Ready,
// then deleted with the hold at work, leave the manager with a
// metadata-only Secret informer and no typed one.
func TestOperatorCachesNoSecretData(t *testing.T) {
	var kinds informerKinds
	w := startFull(t, controller.Options{}, nil, nil, func(o *ctrl.Options) { o.Cache.NewInformer = kinds.newInformer })
	ns := w.server()
	generated := role(ns, "generated", pgtarget.RandomName("gen_"))
	generated.Spec.Login = true
	generated.Spec.Password = &v1alpha1.RolePassword{Generate: &v1alpha1.GeneratedPassword{}}
	w.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pw"}, StringData: map[string]string{"password": "correct horse battery staple"}})
	fromSecret := role(ns, "from-secret", pgtarget.RandomName("sec_"))
	fromSecret.Spec.Login = true
	fromSecret.Spec.Password = &v1alpha1.RolePassword{SecretKeyRef: &v1alpha1.SecretKeySelector{Name: "pw"}}
	for _, r := range []*v1alpha1.Role{generated, fromSecret} {
		w.create(r)
		w.ready(r)
	}
	w.ready(&v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}})
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := w.c.Delete(t.Context(), nsObj); err != nil {
		t.Fatal(err)
	}
	w.waitGone(nsObj)

	got := kinds.list()
	if slices.Contains(got, "*v1.Secret") {
		t.Errorf("the operator's cache made a typed Secret informer (every Secret's data): informers %q", got)
	}
	if !slices.Contains(got, "*v1.PartialObjectMetadata(Secret)") {
		t.Errorf("no metadata-only Secret informer (the hold's watch): informers %q", got)
	}
}

// CacheOptions strip what the cache would otherwise hold of a Secret: its
// data, and annotations (kubectl apply copies the data there).
func TestCacheOptionsStripSecrets(t *testing.T) {
	opts := controller.CacheOptions()
	var transform toolscache.TransformFunc
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			transform = by.Transform
		}
	}
	if transform == nil {
		t.Fatal("CacheOptions has no transform for Secrets")
	}
	annotated := metav1.ObjectMeta{
		Name: "s", Finalizers: []string{"hold.finale.dev/hold"}, ResourceVersion: "7",
		Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"aHVudGVyMg=="}}`},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}
	cases := map[string]struct{ in, want runtime.Object }{
		"typed": {
			in:   &corev1.Secret{ObjectMeta: *annotated.DeepCopy(), Data: map[string][]byte{"password": []byte("hunter2")}},
			want: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Finalizers: []string{"hold.finale.dev/hold"}, ResourceVersion: "7"}},
		},
		"metadata only": {
			in:   &metav1.PartialObjectMetadata{ObjectMeta: *annotated.DeepCopy()},
			want: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "s", Finalizers: []string{"hold.finale.dev/hold"}, ResourceVersion: "7"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := transform(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("transformed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServerPolicy(t *testing.T) {
	p, err := controller.NewServerPolicy([]string{"db.example.com", " *.pg.internal ", "10.20.0.0/16", "192.168.1.7", "fd00::/8", ""})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{
		"db.example.com":      true,
		"DB.Example.COM.":     true,
		"other.example.com":   false,
		"a.pg.internal":       true,
		"a.b.pg.internal":     true,
		"pg.internal":         false,
		"evil-pg.internal":    false,
		"10.20.3.4":           true,
		"10.21.0.1":           false,
		"::ffff:10.20.0.1":    true,
		"192.168.1.7":         true,
		"192.168.1.8":         false,
		"fd00::1":             true,
		"fe80::1%eth0":        false,
		"127.0.0.1":           false,
		"localhost":           false,
		"db.example.com,evil": false,
		"db.example.com:5432": false,
		"010.20.0.1":          false,
		"":                    false,
	}
	got := map[string]bool{}
	for host := range cases {
		got[host] = p.Allows(host)
	}
	if diff := cmp.Diff(cases, got); diff != "" {
		t.Errorf("Allows (-want +got):\n%s", diff)
	}
	var none *controller.ServerPolicy
	if !none.Allows("anything") {
		t.Error("the nil policy refused a host")
	}
	for _, bad := range []string{"10.0.0.0/33", "10.0.0.256", "*.", "bad_name", "fe80::1%eth0", "-x.example.com"} {
		if _, err := controller.NewServerPolicy([]string{bad}); err == nil {
			t.Errorf("NewServerPolicy(%q) = nil error", bad)
		}
	}
	if p, err := controller.NewServerPolicy([]string{" ", ""}); err != nil || p != nil {
		t.Errorf("blank entries: %v, %v; want the nil policy", p, err)
	}
}
