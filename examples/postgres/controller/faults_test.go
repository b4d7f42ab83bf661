package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/faultinject"
)

// G1, the seed incident: the operator's connection goes silent (frozen
// through the proxy, neither closed nor answering) and a Role is deleted.
// The call times out, the connection is evicted, a fresh one is dialled,
// and the deletion finishes without a restart.
func TestFrozenConnectionIsEvictedAndDeletionFinishes(t *testing.T) {
	w := start(t, controller.Options{CallTimeout: 2 * time.Second})
	ns, proxy := w.serverBehindProxy()
	r := role(ns, "r", pgtarget.RandomName("frozen_"))
	w.create(r)
	w.ready(r)
	accepted := proxy.Accepted()

	if n := proxy.Freeze(); n == 0 {
		t.Fatal("no connection to freeze; the test proves nothing")
	}
	start := time.Now()
	if err := w.c.Delete(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	w.waitGone(r)
	if _, ok := w.roleTag(r.Spec.RoleName); ok {
		t.Errorf("role %s still exists after its deletion finished", r.Spec.RoleName)
	}
	if proxy.Accepted() <= accepted {
		t.Error("no new connection was dialled: the frozen one cannot have been evicted")
	}
	t.Logf("deletion through a frozen connection finished in %s", time.Since(start).Round(time.Millisecond))
}

// Stopping the operator in the middle of creating Roles and starting it
// again (same records) creates every role exactly once: no duplicate, and
// after deletion, nothing left.
func TestRestartMidCreationNoDuplicateNoLeftover(t *testing.T) {
	first := start(t, controller.Options{})
	ns := first.server()
	const n = 12
	var roles []*v1alpha1.Role
	for i := range n {
		r := role(ns, fmt.Sprintf("r%d", i), pgtarget.RandomName("restart_"))
		roles = append(roles, r)
		first.create(r)
	}
	readyCount := func(w *world) func(context.Context) (bool, int, error) {
		return func(ctx context.Context) (bool, int, error) {
			var l v1alpha1.RoleList
			if err := w.c.List(ctx, &l, client.InNamespace(ns)); err != nil {
				return false, 0, err
			}
			k := 0
			for _, r := range l.Items {
				if meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionReady) {
					k++
				}
			}
			return k == n, k, nil
		}
	}
	err := controlplane.WaitFor(t.Context(), wait, "some Roles Ready", func(ctx context.Context) (bool, error) {
		_, k, err := readyCount(first)(ctx)
		return k >= 1, err
	})
	if err != nil {
		t.Fatal(err)
	}
	first.stop()
	_, k, _ := readyCount(first)(t.Context())
	t.Logf("operator stopped with %d of %d Roles Ready", k, n)

	second := start(t, controller.Options{RecordsNamespace: first.recNS})
	err = controlplane.WaitFor(t.Context(), wait, "all Roles Ready", func(ctx context.Context) (bool, error) {
		all, _, err := readyCount(second)(ctx)
		return all, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		if err := second.c.Get(t.Context(), client.ObjectKeyFromObject(r), r); err != nil {
			t.Fatal(err)
		}
		ids, err := catalog.FindRolesByTag(t.Context(), second.admin, tagOf(r))
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != 1 || ids[0] != r.Spec.RoleName {
			t.Errorf("Role %s: roles tagged %q, want exactly [%s]", r.Name, ids, r.Spec.RoleName)
		}
	}
	if err := second.c.DeleteAllOf(t.Context(), &v1alpha1.Role{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		second.waitGone(r)
		if _, ok := second.roleTag(r.Spec.RoleName); ok {
			t.Errorf("role %s left after deletion", r.Spec.RoleName)
		}
	}
	if l := second.leaks(); len(l) > 0 {
		t.Errorf("leaked: %q", l)
	}
}

// A session reset under the operator (a failover, a proxy restart) is a
// dead client: the next call fails, the pool evicts it, and the next Role
// is created through a fresh session, without a restart.
func TestResetConnectionIsEvicted(t *testing.T) {
	w := start(t, controller.Options{CallTimeout: 2 * time.Second})
	ns, proxy := w.serverBehindProxy()
	first := role(ns, "first", pgtarget.RandomName("reset_"))
	w.create(first)
	w.ready(first)
	accepted := proxy.Accepted()
	if n := proxy.ResetAll(); n == 0 {
		t.Fatal("no connection to reset; the test proves nothing")
	}
	second := role(ns, "second", pgtarget.RandomName("reset_"))
	w.create(second)
	w.ready(second)
	if tag, ok := w.roleTag(second.Spec.RoleName); !ok || tag != tagOf(second) {
		t.Errorf("role %s: exists %v, tag %q", second.Spec.RoleName, ok, tag)
	}
	if proxy.Accepted() <= accepted {
		t.Error("no new session was dialled after the reset")
	}
}

// A database created under its pending name whose tagging statement then
// fails (a call timeout: the connection freezes when the tag is next) and
// whose Database is deleted before a retry could finish it: the record
// declared the database's name before the create, and the delete of that
// name drops the untagged pending database too. Nothing is left.
//
// The pending database is there untagged either because the attempt's
// CREATE succeeded ("tag times out") or because an earlier attempt's
// CREATE completed after its caller gave up and this attempt found it
// ("CREATE answered late": the proxy holds the CREATE back past the call
// timeout, then delivers it). The call timeout is 10 s, not 2: a CREATE
// DATABASE on a loaded machine can outlast 2 s, and then every attempt
// creates nothing (controller.StatementTimeout says why; CI once waited
// 90 s for the first to succeed).
func TestUntaggedPendingDatabaseIsDropped(t *testing.T) {
	const callTimeout = 10 * time.Second
	for _, tc := range []struct {
		name string
		// late: the first attempt's CREATE reaches PostgreSQL after its
		// call timed out.
		late bool
	}{
		{name: "tag times out"},
		{name: "CREATE answered late", late: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu        sync.Mutex
				proxy     *faultinject.Proxy
				target    *v1alpha1.Database
				c         client.Client
				looks     int    // the first attempt's looks at a database name
				trippedBy string // the statement after which the fault came
			)
			w := start(t, controller.Options{CallTimeout: callTimeout, Statements: func(ctx context.Context, sql string, err error) {
				mu.Lock()
				defer mu.Unlock()
				if proxy == nil || trippedBy != "" {
					return
				}
				switch {
				case tc.late && looks < 2 && isDatabaseLook(sql) && err != nil:
					// The first attempt's second look (its pending name) found
					// nothing: its CREATE is next, and is held back.
					if looks++; looks == 2 {
						proxy.SetLatency(callTimeout + time.Second)
					}
				case tc.late && looks == 2 && isPendingCreate(sql) && err != nil:
					proxy.SetLatency(0) // the CREATE already held stays held
				case err == nil && (isPendingCreate(sql) || isDatabaseLook(sql)):
					// The pending database is there untagged and its tag is
					// next (no database of the wanted name exists before
					// the tag is written, so a look that finds one finds the
					// pending one).
					trippedBy = sql
					proxy.Freeze()                                   // the COMMENT that follows times out
					_ = c.Delete(context.WithoutCancel(ctx), target) // and the Database goes before a retry
				}
			}})
			ns, p := w.serverBehindProxy()
			d := database(ns, "d", pgtarget.RandomName("pending_"), "")
			mu.Lock()
			proxy, target, c = p, d, w.c
			mu.Unlock()
			w.create(d)
			// An attempt that creates nothing waits out its window (21 s
			// here) before the next.
			err := controlplane.WaitFor(t.Context(), 3*time.Minute, "a create attempt reaching its tag", func(context.Context) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				return trippedBy != "", nil
			})
			if err != nil {
				t.Fatal(err)
			}
			w.waitGone(d)
			mu.Lock()
			if tc.late && !isDatabaseLook(trippedBy) {
				t.Errorf("the tag came after %q, not after a look that found the late CREATE's database: the test proves nothing", trippedBy)
			}
			mu.Unlock()
			pending := catalog.PendingDatabaseName(tagOf(d))
			if _, ok := w.database(pending); ok {
				t.Errorf("the untagged pending database %s outlived its Database", pending)
			}
			if _, ok := w.database(d.Spec.DatabaseName); ok {
				t.Errorf("database %s exists", d.Spec.DatabaseName)
			}
			if w.record(string(d.UID)) != nil {
				t.Error("record left")
			}
		})
	}
}

func isPendingCreate(sql string) bool {
	return strings.HasPrefix(sql, `CREATE DATABASE "`+catalog.PendingPrefix)
}

// isDatabaseLook reports catalog.ObserveDatabase's query.
func isDatabaseLook(sql string) bool {
	return strings.HasPrefix(sql, "SELECT pg_get_userbyid(datdba)")
}
