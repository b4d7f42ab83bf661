package controller_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/internal/pgtarget"
)

// benchRoles is how many Roles one lifecycle run creates and deletes;
// FINALE_BENCH_ROLES overrides it.
func benchRoles() int {
	if n, err := strconv.Atoi(os.Getenv("FINALE_BENCH_ROLES")); err == nil && n > 0 {
		return n
	}
	return 200
}

// lifecycleRun creates n Roles, waits until all are Ready, deletes them and
// waits until the objects are gone and the roles dropped. It returns the
// wall time and the operator's API writes per Role.
func lifecycleRun(b *testing.B, o controller.Options, n int) (time.Duration, float64) {
	script := faultinject.NewScript()
	w := startWith(b, o, nil, func(c client.Client) client.Client { return faultinject.WrapClient(c, script) })
	ns := w.server()
	prefix := pgtarget.RandomName("bench_") + "_"
	srvWrites := waitServerReady(b, w, ns, script)
	start := time.Now()
	for i := range n {
		w.create(role(ns, fmt.Sprintf("r%d", i), fmt.Sprintf("%s%d", prefix, i)))
	}
	waitRoles(b, w, ns, "all Ready", func(l *v1alpha1.RoleList) bool {
		if len(l.Items) != n {
			return false
		}
		for _, r := range l.Items {
			if !meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionReady) {
				return false
			}
		}
		return true
	})
	readyAt := time.Since(start)
	if err := w.c.DeleteAllOf(b.Context(), &v1alpha1.Role{}, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	waitRoles(b, w, ns, "all gone", func(l *v1alpha1.RoleList) bool { return len(l.Items) == 0 })
	elapsed := time.Since(start)
	var left int
	if err := w.admin.QueryRow(b.Context(), "SELECT count(*) FROM pg_roles WHERE rolname LIKE $1", prefix+"%").Scan(&left); err != nil || left != 0 {
		b.Fatalf("%d roles left in PostgreSQL (err %v)", left, err)
	}
	w.stop()
	if os.Getenv("FINALE_BENCH_DEBUG") != "" {
		byVerb := map[string]int{}
		for _, c := range script.Calls() {
			if c.Verb.IsWrite() {
				byVerb[string(c.Verb)+" "+c.Kind+errString(c.Err)]++
			}
		}
		b.Logf("naive=%v all Ready after %s, all gone %s later; writes by verb: %v", o.Naive, readyAt, elapsed-readyAt, byVerb)
	}
	return elapsed, float64(script.Writes()-srvWrites) / float64(n)
}

func waitServerReady(b *testing.B, w *world, ns string, script *faultinject.Script) int {
	srv := &v1alpha1.Server{}
	srv.Namespace, srv.Name = ns, "pg"
	w.ready(srv)
	return script.Writes()
}

func waitRoles(b *testing.B, w *world, ns, what string, done func(*v1alpha1.RoleList) bool) {
	err := controlplane.WaitFor(b.Context(), 10*time.Minute, what, func(ctx context.Context) (bool, error) {
		var l v1alpha1.RoleList
		if err := w.c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		return done(&l), nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRoleLifecycle creates then deletes benchRoles() Roles with the
// guarantees on (records, hold, evicting pool) and off (the naive build),
// and reports both wall times, their ratio and the API writes per Role
// lifecycle counted at the operator's client. Run it with -benchtime=1x.
func BenchmarkRoleLifecycle(b *testing.B) {
	n := benchRoles()
	for b.Loop() {
		on, onWrites := lifecycleRun(b, controller.Options{}, n)
		off, offWrites := lifecycleRun(b, controller.Options{Naive: true}, n)
		b.ReportMetric(on.Seconds(), "s-on")
		b.ReportMetric(off.Seconds(), "s-off")
		b.ReportMetric(on.Seconds()/off.Seconds(), "ratio-on/off")
		b.ReportMetric(onWrites, "writes/role-on")
		b.ReportMetric(offWrites, "writes/role-off")
		b.ReportMetric(float64(n), "roles")
	}
}

func errString(err error) string {
	if err != nil {
		return " (error)"
	}
	return ""
}

// BenchmarkNamespaceDeletion creates benchRoles() Roles in a namespace,
// deletes the namespace and measures the time until it is gone (every role
// dropped through the hold), against dropping as many roles directly with
// one connection. Run it with -benchtime=1x.
func BenchmarkNamespaceDeletion(b *testing.B) {
	n := benchRoles()
	for b.Loop() {
		w := start(b, controller.Options{})
		ns := w.server()
		prefix := pgtarget.RandomName("nsbench_") + "_"
		for i := range n {
			w.create(role(ns, fmt.Sprintf("r%d", i), fmt.Sprintf("%s%d", prefix, i)))
		}
		waitRoles(b, w, ns, "all Ready", func(l *v1alpha1.RoleList) bool {
			ready := 0
			for _, r := range l.Items {
				if meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionReady) {
					ready++
				}
			}
			return ready == n
		})
		start := time.Now()
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if err := w.c.Delete(b.Context(), nsObj); err != nil {
			b.Fatal(err)
		}
		if err := controlplane.WaitGone(b.Context(), w.c, nsObj, 10*time.Minute); err != nil {
			b.Fatal(err)
		}
		viaOperator := time.Since(start)
		var left int
		if err := w.admin.QueryRow(b.Context(), "SELECT count(*) FROM pg_roles WHERE rolname LIKE $1", prefix+"%").Scan(&left); err != nil || left != 0 {
			b.Fatalf("%d roles left (err %v)", left, err)
		}
		w.stop()

		// The same number of roles, created and dropped by hand.
		direct := pgtarget.RandomName("direct_") + "_"
		for i := range n {
			if _, err := w.admin.Exec(b.Context(), fmt.Sprintf("CREATE ROLE %s%d", direct, i)); err != nil {
				b.Fatal(err)
			}
		}
		start = time.Now()
		for i := range n {
			if _, err := w.admin.Exec(b.Context(), fmt.Sprintf("DROP ROLE %s%d", direct, i)); err != nil {
				b.Fatal(err)
			}
		}
		byHand := time.Since(start)
		b.ReportMetric(viaOperator.Seconds(), "s-namespace-gone")
		b.ReportMetric(byHand.Seconds(), "s-direct-drop")
		b.ReportMetric(float64(n), "roles")
	}
}
