package catalog_test

import (
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
