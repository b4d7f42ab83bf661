package catalog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/examples/postgres/catalog"
)

// An ownership tag is written as a string literal (COMMENT ON ROLE takes no
// parameters) and read back by comparison: whatever the tag, either the
// catalog refuses it (Invalid) and nothing is created, or the role carries
// exactly that tag, is found by it, and no statement but the intended one
// ran (the number of roles grew by one, and shrinks back on drop).
func FuzzTagIsQuotedSafely(f *testing.F) {
	for _, s := range []string{
		"finale:role:0b5ec1b2-7a61-4f4e-9d7e-3a4d2f1b9c11", "", "'", "''", `\`, `\'`, `'; DROP ROLE postgres; --`,
		"E'x'", "$$", "$tag$", "a\x00b", "é", "\xff\xfe", "\n\r\t", "finale:role:u' || 'x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		q := connect(t, "postgres")
		ctx := t.Context()
		count := func() int {
			var n int
			if err := q.QueryRow(ctx, "SELECT count(*) FROM pg_roles").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := count()
		name := unique("tagfuzz_")
		err := catalog.CreateRole(ctx, q, catalog.RoleSpec{Name: name, ConnectionLimit: -1}, tag)
		if err != nil {
			var ce *catalog.Error
			var pe *pgconn.PgError
			if !errors.As(err, &ce) && !(errors.As(err, &pe) && errclass.Of(ctx, err) == errclass.Invalid) {
				t.Fatalf("CreateRole with tag %q: %v (%T), want a catalog refusal or an Invalid answer", tag, err, err)
			}
			if _, ok, err := catalog.ObserveRole(ctx, q, name); err != nil || ok {
				t.Fatalf("refused tag %q, yet role %s exists (err %v)", tag, name, err)
			}
			if after := count(); after != before {
				t.Fatalf("refused tag %q changed the number of roles from %d to %d", tag, before, after)
			}
			return
		}
		if after := count(); after != before+1 {
			t.Fatalf("tag %q: roles went from %d to %d, want one more", tag, before, after)
		}
		got, ok, err := catalog.ObserveRole(ctx, q, name)
		if err != nil || !ok {
			t.Fatalf("role %s: exists %v err %v", name, ok, err)
		}
		if got.Tag != tag {
			t.Fatalf("tag written %q, read back %q", tag, got.Tag)
		}
		ids, err := catalog.FindRolesByTag(ctx, q, tag)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{name}, ids); diff != "" {
			t.Fatalf("roles found by tag %q (-want +got):\n%s", tag, diff)
		}
		if err := catalog.DropRole(ctx, q, name, tag); err != nil {
			t.Fatal(err)
		}
		if after := count(); after != before {
			t.Fatalf("after drop: %d roles, want %d", after, before)
		}
	})
}

// An external ID comes back from a record (any ConfigMap content, if the
// MAC were ever bypassed) and reaches DROP ROLE: whatever the ID, a drop
// under the victim's own tag removes no role but the one of exactly that
// name, and one carrying another tag is never dropped.
func FuzzExternalIDDropsOnlyItsRole(f *testing.F) {
	for _, s := range []string{
		"victim", "Victim", `"victim"`, "victim; DROP ROLE postgres", "victim\x00", " victim", "victim ", "postgres",
		"", "pg_monitor", `victim" CASCADE --`, "\xff", "a.victim",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		q := connect(t, "postgres")
		ctx := t.Context()
		victim, tag := unique("idfuzz_"), "finale:role:victim-uid"
		if err := catalog.CreateRole(ctx, q, catalog.RoleSpec{Name: victim, ConnectionLimit: -1}, tag); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = catalog.DropRole(context.Background(), q, victim, tag) })
		if id == "victim" {
			id = victim // the seed that must drop it
		}
		var before int
		if err := q.QueryRow(ctx, "SELECT count(*) FROM pg_roles").Scan(&before); err != nil {
			t.Fatal(err)
		}
		_ = catalog.DropRole(ctx, q, id, "finale:role:other-uid")
		err := catalog.DropRole(ctx, q, id, tag)
		var after int
		if err := q.QueryRow(ctx, "SELECT count(*) FROM pg_roles").Scan(&after); err != nil {
			t.Fatal(err)
		}
		_, exists, oerr := catalog.ObserveRole(ctx, q, victim)
		if oerr != nil {
			t.Fatal(oerr)
		}
		want := before
		if id == victim {
			want--
			if err != nil || exists {
				t.Fatalf("dropping %q by its own tag: err %v, still exists %v", id, err, exists)
			}
		} else if !exists {
			t.Fatalf("ID %q dropped role %s", id, victim)
		}
		if after != want {
			t.Fatalf("ID %q: roles went from %d to %d, want %d", id, before, after, want)
		}
	})
}
