package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
)

// A create in doubt: the operator's CREATE ROLE waits on a lock (another
// session creating the same name, uncommitted) past the call timeout, and
// the operator abandons the call. The closed socket does not stop the
// backend, and pgx's cancel request need not reach it (on a failing path
// it may not): a backend still waiting commits the role once the lock is
// released. The Role is then deleted (and its record must not go before
// that create can no longer land), or kept (and its retry must make no
// second role). Test setting: a 2 s call timeout.
func TestCreateInDoubt(t *testing.T) {
	for _, deleted := range []bool{true, false} {
		name := map[bool]string{true: "deleted", false: "kept"}[deleted]
		t.Run(name, func(t *testing.T) {
			w := start(t, controller.Options{CallTimeout: 2 * time.Second})
			ns := w.server()
			ctx := t.Context()
			roleName := pgtarget.RandomName("doubt_")

			blocker, err := pgx.Connect(ctx, w.pg.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = blocker.Close(context.Background()) })
			tx, err := blocker.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "CREATE ROLE "+pgx.Identifier{roleName}.Sanitize()); err != nil {
				t.Fatal(err)
			}

			r := role(ns, "r", roleName)
			w.create(r)
			err = controlplane.WaitFor(ctx, wait, "the operator's CREATE ROLE waiting on the lock", func(ctx context.Context) (bool, error) {
				var n int
				err := w.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'CREATE ROLE ' || $1 || '%'`,
					pgx.Identifier{roleName}.Sanitize()).Scan(&n)
				return n > 0, err
			})
			if err != nil {
				t.Fatal(err)
			}
			err = controlplane.WaitFor(ctx, wait, "the create abandoned at the call timeout", func(ctx context.Context) (bool, error) {
				if err := w.c.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
					return false, err
				}
				return meta.IsStatusConditionFalse(r.Status.Conditions, v1alpha1.ConditionSynced), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if deleted {
				if err := w.c.Delete(ctx, r); err != nil {
					t.Fatal(err)
				}
				w.waitGone(r)
			}
			// The other session gives the name up: a CREATE still running
			// in the server would now commit.
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if deleted {
				err = controlplane.WaitFor(ctx, wait, "no backend running the create", func(ctx context.Context) (bool, error) {
					var n int
					err := w.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'CREATE ROLE ' || $1 || '%'`,
						pgx.Identifier{roleName}.Sanitize()).Scan(&n)
					return n == 0, err
				})
				if err != nil {
					t.Fatal(err)
				}
				if tag, ok := w.roleTag(roleName); ok {
					t.Errorf("role %s (comment %q) exists after its Role's deletion finished: the create landed after its record was removed", roleName, tag)
				}
				if l := w.leaks(); len(l) > 0 {
					t.Errorf("leaked: %q", l)
				}
				return
			}
			w.ready(r)
			ids, err := catalog.FindRolesByTag(ctx, w.admin, tagOf(r))
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) != 1 || ids[0] != roleName {
				t.Errorf("roles carrying the Role's tag: %q, want exactly [%s]", ids, roleName)
			}
			if err := w.c.Delete(ctx, r); err != nil {
				t.Fatal(err)
			}
			w.waitGone(r)
			w.waitGoneFromPostgres("role", roleName)
		})
	}
}
