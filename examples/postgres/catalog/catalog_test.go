package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// seq makes names unique across the tests sharing one server.
var seq atomic.Int64

func unique(prefix string) string {
	return fmt.Sprintf("%s%d", prefix, seq.Add(1))
}

// connect opens an admin connection to database db of the shared server.
func connect(t *testing.T, db string) *pgx.Conn {
	t.Helper()
	pg := testenv.Postgres(t)
	conn, err := pgx.Connect(t.Context(), pg.DSNVia(pg.Addr(), db))
	if err != nil {
		t.Fatalf("connect to %s: %v", db, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// connectAs opens a connection as user with password, to database postgres.
func connectAs(ctx context.Context, t *testing.T, user, password string) (*pgx.Conn, error) {
	t.Helper()
	cfg, err := pgx.ParseConfig(testenv.Postgres(t).DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = user, password
	return pgx.ConnectConfig(ctx, cfg)
}

// reason is the catalog reason of err, or "" when err is not a *catalog.Error.
func reason(err error) catalog.Reason {
	var e *catalog.Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestIdentity(t *testing.T) {
	a, b := connect(t, "postgres"), connect(t, "postgres")
	idA, err := catalog.Identity(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := strconv.ParseUint(idA, 10, 64); err != nil || n == 0 {
		t.Errorf("Identity() = %q, want a non-zero decimal system_identifier (%v)", idA, err)
	}
	idB, err := catalog.Identity(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	if idA != idB {
		t.Errorf("two connections to one server see identities %q and %q", idA, idB)
	}

	// A plain login role, without superuser or grants, reads it too.
	name, tag := unique("identity_reader_"), unique("finale:identity-")
	if err := catalog.CreateRole(t.Context(), a, catalog.RoleSpec{Name: name, Login: true, ConnectionLimit: -1, Password: "reader-pw"}, tag); err != nil {
		t.Fatal(err)
	}
	plain, err := connectAs(t.Context(), t, name, "reader-pw")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plain.Close(context.Background()) }()
	idPlain, err := catalog.Identity(t.Context(), plain)
	if err != nil {
		t.Fatalf("Identity as a plain role: %v", err)
	}
	if idPlain != idA {
		t.Errorf("a plain role sees identity %q, the admin %q", idPlain, idA)
	}
}

// Names a user could type that break naive quoting; each must name exactly
// one object, and a role named "victim" must survive them all.
var trickyNames = map[string]string{
	"plain":              "plain_",
	"mixed case":         "MiXeD_",
	"space":              "with space ",
	"single quote":       "it's ",
	"double quote":       `a"b `,
	"injection":          `x"; DROP ROLE victim; --`,
	"backslash":          `back\slash `,
	"non-ASCII":          "rôle_",
	"comment opener":     "/* c */ ",
	"dollar quote":       "$$ $x$ ",
	"semicolon and dash": "a;--b ",
}

func TestRoleLifecycle(t *testing.T) {
	conn := connect(t, "postgres")
	mustExec(t, conn, `DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'victim') THEN CREATE ROLE victim; END IF; END $$`)
	for caseName, prefix := range trickyNames {
		t.Run(caseName, func(t *testing.T) {
			ctx := t.Context()
			name := unique(prefix)
			tag := `finale:` + name + `:uid-1'\`
			spec := catalog.RoleSpec{Name: name, Login: true, ConnectionLimit: 3, Password: "s3cret 'quoted' \\ pw"}

			if err := catalog.CreateRole(ctx, conn, spec, tag); err != nil {
				t.Fatalf("CreateRole: %v", err)
			}
			got, ok, err := catalog.ObserveRole(ctx, conn, name)
			if err != nil || !ok {
				t.Fatalf("ObserveRole after create: ok=%v err=%v", ok, err)
			}
			if diff := cmp.Diff(catalog.Role{Name: name, Login: true, ConnectionLimit: 3, Tag: tag}, got); diff != "" {
				t.Errorf("role after create (-want +got):\n%s", diff)
			}
			found, err := catalog.FindRolesByTag(ctx, conn, tag)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{name}, found); diff != "" {
				t.Errorf("FindRolesByTag (-want +got):\n%s", diff)
			}
			// The password works, and only that one.
			login, err := connectAs(ctx, t, name, string(spec.Password))
			if err != nil {
				t.Fatalf("log in with the role's password: %v", err)
			}
			_ = login.Close(ctx)
			if login, err := connectAs(ctx, t, name, "wrong"); err == nil {
				_ = login.Close(ctx)
				t.Errorf("logged in with a wrong password")
			}

			// A repeated create (its answer lost, say) is success, not a duplicate.
			if err := catalog.CreateRole(ctx, conn, spec, tag); err != nil {
				t.Errorf("second CreateRole with the same tag: %v", err)
			}

			alter := catalog.RoleSpec{Name: name, Login: false, ConnectionLimit: -1}
			if err := catalog.AlterRole(ctx, conn, alter, tag); err != nil {
				t.Fatalf("AlterRole: %v", err)
			}
			got, _, err = catalog.ObserveRole(ctx, conn, name)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(catalog.Role{Name: name, Login: false, ConnectionLimit: -1, Tag: tag}, got); diff != "" {
				t.Errorf("role after alter (-want +got):\n%s", diff)
			}

			if err := catalog.DropRole(ctx, conn, name, tag); err != nil {
				t.Fatalf("DropRole: %v", err)
			}
			if _, ok, err := catalog.ObserveRole(ctx, conn, name); err != nil || ok {
				t.Errorf("after DropRole: exists=%v err=%v", ok, err)
			}
			if err := catalog.DropRole(ctx, conn, name, tag); err != nil {
				t.Errorf("DropRole of a role that is gone = %v, want success", err)
			}
		})
	}
	if _, ok, err := catalog.ObserveRole(t.Context(), conn, "victim"); err != nil || !ok {
		t.Errorf("role victim: exists=%v err=%v; an injected statement ran", ok, err)
	}
}

func TestPasswordNeverInClear(t *testing.T) {
	const pw = catalog.Password("hunter2-do-not-log")
	spec := catalog.RoleSpec{Name: "app", Login: true, Password: pw}
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{
		"%v":   fmt.Sprintf("%v", spec),
		"%+v":  fmt.Sprintf("%+v", spec),
		"%#v":  fmt.Sprintf("%#v", spec),
		"%s":   fmt.Sprintf("%s", pw),
		"%q":   fmt.Sprintf("%q", pw),
		"%x":   fmt.Sprintf("%x", pw),
		"json": string(js),
	}
	for verb, out := range outputs {
		if strings.Contains(out, string(pw)) || strings.Contains(out, fmt.Sprintf("%x", string(pw))) {
			t.Errorf("%s prints the password: %s", verb, out)
		}
		if !strings.Contains(out, "[redacted]") {
			t.Errorf("%s = %s, want [redacted] in place of the password", verb, out)
		}
	}

	// The server stores (and was sent) a SCRAM verifier, not the password.
	conn := connect(t, "postgres")
	name, tag := unique("pwcheck_"), unique("tag-")
	if err := catalog.CreateRole(t.Context(), conn, catalog.RoleSpec{Name: name, Login: true, ConnectionLimit: -1, Password: pw}, tag); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := conn.QueryRow(t.Context(), "SELECT rolpassword FROM pg_authid WHERE rolname = $1", name).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stored, "SCRAM-SHA-256$4096:") || strings.Contains(stored, string(pw)) {
		t.Errorf("pg_authid.rolpassword = %q, want a SCRAM-SHA-256 verifier", stored)
	}
}

// TestNotOwned proves an object of the same name without the tag is never
// adopted, altered or dropped.
func TestNotOwned(t *testing.T) {
	ctx := t.Context()
	conn := connect(t, "postgres")
	role, db := unique("theirs_role_"), unique("theirs_db_")
	mustExec(t, conn, "CREATE ROLE "+role)
	mustExec(t, conn, "CREATE DATABASE "+db)
	mustExec(t, conn, "COMMENT ON DATABASE "+db+" IS 'someone else'")
	tag := unique("finale:mine-")

	cases := map[string]func() error{
		"create role": func() error {
			return catalog.CreateRole(ctx, conn, catalog.RoleSpec{Name: role, ConnectionLimit: -1}, tag)
		},
		"alter role": func() error {
			return catalog.AlterRole(ctx, conn, catalog.RoleSpec{Name: role, Login: true, ConnectionLimit: 1}, tag)
		},
		"drop role":             func() error { return catalog.DropRole(ctx, conn, role, tag) },
		"create database":       func() error { return catalog.CreateDatabase(ctx, conn, catalog.DatabaseSpec{Name: db}, tag) },
		"alter database owner":  func() error { return catalog.AlterDatabaseOwner(ctx, conn, db, role, tag) },
		"drop database":         func() error { return catalog.DropDatabase(ctx, conn, db, tag) },
		"drop role (empty tag)": func() error { return catalog.DropRole(ctx, conn, role, "") },
		"drop db (empty tag)":   func() error { return catalog.DropDatabase(ctx, conn, db, "") },
		"find role (empty tag)": func() error { _, err := catalog.FindRolesByTag(ctx, conn, ""); return err },
		"find db (empty tag)":   func() error { _, err := catalog.FindDatabasesByTag(ctx, conn, ""); return err },
		"create role (long tag)": func() error {
			return catalog.CreateRole(ctx, conn, catalog.RoleSpec{Name: role}, strings.Repeat("t", 2000))
		},
	}
	want := map[string]catalog.Reason{
		"create role":          catalog.ReasonNotOwned,
		"alter role":           catalog.ReasonNotOwned,
		"drop role":            catalog.ReasonNotOwned,
		"create database":      catalog.ReasonNotOwned,
		"alter database owner": catalog.ReasonNotOwned,
		// Nothing of this tag is under that name: success, theirs untouched.
		"drop database":          "",
		"drop role (empty tag)":  catalog.ReasonInvalid,
		"drop db (empty tag)":    catalog.ReasonInvalid,
		"find role (empty tag)":  catalog.ReasonInvalid,
		"find db (empty tag)":    catalog.ReasonInvalid,
		"create role (long tag)": catalog.ReasonInvalid,
	}
	got := map[string]catalog.Reason{}
	for name, call := range cases {
		err := call()
		got[name] = reason(err)
		if reason(err) == catalog.ReasonNotOwned {
			if !errors.Is(err, catalog.ErrConflict) {
				t.Errorf("%s: %v does not match ErrConflict", name, err)
			}
			if !strings.Contains(err.Error(), "was not created for this object") {
				t.Errorf("%s: message %q does not say the object is someone else's", name, err)
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
	r, ok, err := catalog.ObserveRole(ctx, conn, role)
	if err != nil || !ok {
		t.Fatalf("their role: exists=%v err=%v", ok, err)
	}
	if diff := cmp.Diff(catalog.Role{Name: role, ConnectionLimit: -1}, r); diff != "" {
		t.Errorf("their role changed (-want +got):\n%s", diff)
	}
	d, ok, err := catalog.ObserveDatabase(ctx, conn, db)
	if err != nil || !ok {
		t.Fatalf("their database: exists=%v err=%v", ok, err)
	}
	if diff := cmp.Diff(catalog.Database{Name: db, Owner: "finale", Tag: "someone else"}, d); diff != "" {
		t.Errorf("their database changed (-want +got):\n%s", diff)
	}
}

func TestInvalidInput(t *testing.T) {
	ctx := t.Context()
	conn := connect(t, "postgres")
	long := unique("l") + strings.Repeat("x", 70)
	cases := map[string]func() error{
		"empty role name": func() error { return catalog.CreateRole(ctx, conn, catalog.RoleSpec{Name: ""}, "t") },
		"64-byte role name": func() error {
			return catalog.CreateRole(ctx, conn, catalog.RoleSpec{Name: long, ConnectionLimit: -1}, "t")
		},
		"NUL in role name": func() error { return catalog.CreateRole(ctx, conn, catalog.RoleSpec{Name: "a\x00b"}, "t") },
		"NUL in tag":       func() error { return catalog.CreateRole(ctx, conn, catalog.RoleSpec{Name: "nul_tag"}, "a\x00b") },
		"connection limit -2": func() error {
			return catalog.CreateRole(ctx, conn, catalog.RoleSpec{Name: "cl", ConnectionLimit: -2}, "t")
		},
		"password newline": func() error {
			return catalog.CreateRole(ctx, conn, catalog.RoleSpec{Name: "pwnl", Password: "pw\n"}, "t")
		},
		"password non-ASCII": func() error {
			return catalog.CreateRole(ctx, conn, catalog.RoleSpec{Name: "pwna", Password: "pässword"}, "t")
		},
		"64-byte database":     func() error { return catalog.CreateDatabase(ctx, conn, catalog.DatabaseSpec{Name: long}, "t") },
		"observe long role":    func() error { _, _, err := catalog.ObserveRole(ctx, conn, long); return err },
		"database owner empty": func() error { return catalog.AlterDatabaseOwner(ctx, conn, "x", "", "t") },
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, catalog.ErrInvalid) {
				t.Fatalf("got %v, want an error matching ErrInvalid", err)
			}
			if got := errclass.New(catalog.Classify).Classify(ctx, fmt.Errorf("wrapped: %w", err)); got != errclass.Invalid {
				t.Errorf("class %q, want %q", got, errclass.Invalid)
			}
			if strings.Contains(err.Error(), "pw\n") || strings.Contains(err.Error(), "pässword") {
				t.Errorf("error %q quotes the password", err)
			}
		})
	}
	// Nothing was created under the name PostgreSQL would have truncated to.
	if _, ok, err := catalog.ObserveRole(ctx, conn, long[:catalog.MaxNameLen]); err != nil || ok {
		t.Errorf("truncated role: exists=%v err=%v", ok, err)
	}
	for _, n := range []string{"nul_tag", "cl", "pwnl", "pwna"} {
		if _, ok, err := catalog.ObserveRole(ctx, conn, n); err != nil || ok {
			t.Errorf("role %s: exists=%v err=%v after a refused create", n, ok, err)
		}
	}
}

// TestDropRoleOwnsObjects proves a role that still owns objects is a
// Conflict saying what to do, is not dropped, and is dropped once the user
// has done it.
func TestDropRoleOwnsObjects(t *testing.T) {
	ctx := t.Context()
	conn := connect(t, "postgres")
	name, tag := unique("owner_"), unique("finale:owner-")
	if err := catalog.CreateRole(ctx, conn, catalog.RoleSpec{Name: name, ConnectionLimit: -1}, tag); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{unique("owned_table_")}.Sanitize()
	mustExec(t, conn, "CREATE TABLE "+table+" (id int)")
	mustExec(t, conn, "ALTER TABLE "+table+" OWNER TO "+name)

	err := catalog.DropRole(ctx, conn, name, tag)
	if got, want := reason(err), catalog.ReasonOwnsObjects; got != want {
		t.Fatalf("DropRole = %v (reason %q), want reason %q", err, got, want)
	}
	if got := errclass.New(catalog.Classify).Classify(ctx, err); got != errclass.Conflict {
		t.Errorf("class %q, want %q", got, errclass.Conflict)
	}
	for _, want := range []string{"still owns objects", "REASSIGN OWNED BY", "owner of table"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not contain %q", err, want)
		}
	}
	if _, ok, err := catalog.ObserveRole(ctx, conn, name); err != nil || !ok {
		t.Fatalf("role after a refused drop: exists=%v err=%v", ok, err)
	}

	mustExec(t, conn, "DROP TABLE "+table)
	if err := catalog.DropRole(ctx, conn, name, tag); err != nil {
		t.Fatalf("DropRole once it owns nothing: %v", err)
	}
}

func TestDatabaseLifecycle(t *testing.T) {
	conn := connect(t, "postgres")
	ctx := t.Context()
	owner1, owner2 := unique("db_owner_"), unique("db_owner_")
	mustExec(t, conn, "CREATE ROLE "+owner1)
	mustExec(t, conn, "CREATE ROLE "+owner2)
	for caseName, prefix := range trickyNames {
		t.Run(caseName, func(t *testing.T) {
			name := unique(prefix)
			tag := `finale:db:` + name + `'\`
			if err := catalog.CreateDatabase(ctx, conn, catalog.DatabaseSpec{Name: name, Owner: owner1}, tag); err != nil {
				t.Fatalf("CreateDatabase: %v", err)
			}
			got, ok, err := catalog.ObserveDatabase(ctx, conn, name)
			if err != nil || !ok {
				t.Fatalf("ObserveDatabase: ok=%v err=%v", ok, err)
			}
			if diff := cmp.Diff(catalog.Database{Name: name, Owner: owner1, Tag: tag}, got); diff != "" {
				t.Errorf("database after create (-want +got):\n%s", diff)
			}
			found, err := catalog.FindDatabasesByTag(ctx, conn, tag)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{name}, found); diff != "" {
				t.Errorf("FindDatabasesByTag (-want +got):\n%s", diff)
			}
			if err := catalog.CreateDatabase(ctx, conn, catalog.DatabaseSpec{Name: name, Owner: owner1}, tag); err != nil {
				t.Errorf("second CreateDatabase with the same tag: %v", err)
			}
			if err := catalog.AlterDatabaseOwner(ctx, conn, name, owner2, tag); err != nil {
				t.Fatalf("AlterDatabaseOwner: %v", err)
			}
			if got, _, _ := catalog.ObserveDatabase(ctx, conn, name); got.Owner != owner2 {
				t.Errorf("owner after alter = %q, want %q", got.Owner, owner2)
			}
			if err := catalog.DropDatabase(ctx, conn, name, tag); err != nil {
				t.Fatalf("DropDatabase: %v", err)
			}
			if _, ok, err := catalog.ObserveDatabase(ctx, conn, name); err != nil || ok {
				t.Errorf("after DropDatabase: exists=%v err=%v", ok, err)
			}
			if err := catalog.DropDatabase(ctx, conn, name, tag); err != nil {
				t.Errorf("DropDatabase of a database that is gone = %v, want success", err)
			}
		})
	}
}

func TestCreateDatabaseOwnerMissing(t *testing.T) {
	ctx := t.Context()
	conn := connect(t, "postgres")
	name, tag, owner := unique("orphan_db_"), unique("finale:orphan-"), unique("no_such_role_")
	err := catalog.CreateDatabase(ctx, conn, catalog.DatabaseSpec{Name: name, Owner: owner}, tag)
	if got, want := reason(err), catalog.ReasonOwnerMissing; got != want {
		t.Fatalf("CreateDatabase = %v (reason %q), want reason %q", err, got, want)
	}
	if !strings.Contains(err.Error(), "create it first") {
		t.Errorf("message %q does not say what to do", err)
	}
	for _, n := range []string{name, catalog.PendingDatabaseName(tag)} {
		if _, ok, err := catalog.ObserveDatabase(ctx, conn, n); err != nil || ok {
			t.Errorf("database %s: exists=%v err=%v after a refused create", n, ok, err)
		}
	}
}

// TestDatabaseCreateInterrupted proves a create cut off after any of its
// steps is finished by the next CreateDatabase, or cleaned by DropDatabase,
// and leaves no database behind.
func TestDatabaseCreateInterrupted(t *testing.T) {
	ctx := t.Context()
	conn := connect(t, "postgres")
	cases := map[string]struct {
		tagged bool // the crash came after the COMMENT
		finish bool // CreateDatabase again (else DropDatabase)
	}{
		"after create, then create":  {finish: true},
		"after create, then drop":    {},
		"after comment, then create": {tagged: true, finish: true},
		"after comment, then drop":   {tagged: true},
	}
	for caseName, tc := range cases {
		t.Run(caseName, func(t *testing.T) {
			name, tag := unique("interrupted_"), unique("finale:interrupted-")
			pending := pgx.Identifier{catalog.PendingDatabaseName(tag)}.Sanitize()
			mustExec(t, conn, "CREATE DATABASE "+pending)
			if tc.tagged {
				mustExec(t, conn, "COMMENT ON DATABASE "+pending+" IS '"+tag+"'")
				found, err := catalog.FindDatabasesByTag(ctx, conn, tag)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]string{catalog.PendingDatabaseName(tag)}, found); diff != "" {
					t.Errorf("an interrupted create is not found by its tag (-want +got):\n%s", diff)
				}
			}
			var want []string
			if tc.finish {
				if err := catalog.CreateDatabase(ctx, conn, catalog.DatabaseSpec{Name: name}, tag); err != nil {
					t.Fatalf("CreateDatabase: %v", err)
				}
				want = []string{name}
			} else if err := catalog.DropDatabase(ctx, conn, name, tag); err != nil {
				t.Fatalf("DropDatabase: %v", err)
			}
			var got []string
			if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, "SELECT datname FROM pg_database WHERE datname IN ($1, $2) ORDER BY 1", name, catalog.PendingDatabaseName(tag))
				if err != nil {
					return err
				}
				got, err = pgx.CollectRows(rows, pgx.RowTo[string])
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("databases left (-want +got):\n%s", diff)
			}
			if tc.finish {
				if d, _, _ := catalog.ObserveDatabase(ctx, conn, name); d.Tag != tag {
					t.Errorf("finished database has tag %q, want %q", d.Tag, tag)
				}
			}
		})
	}
}

// TestCreateDatabaseStopsAtAFailedCreate proves a CREATE DATABASE that
// fails without an answer from PostgreSQL (a timeout) ends the create with
// that error: nothing is tagged or renamed after it. It once went on to
// the tag as if the CREATE had succeeded, and reported the tag's failure.
func TestCreateDatabaseStopsAtAFailedCreate(t *testing.T) {
	lost := errors.New("read tcp: i/o timeout")
	q := &failCreate{Querier: connect(t, "postgres"), err: lost}
	name, tag := unique("lost_"), unique("finale:lost-")
	err := catalog.CreateDatabase(t.Context(), q, catalog.DatabaseSpec{Name: name}, tag)
	if !errors.Is(err, lost) || !strings.Contains(err.Error(), "create database") {
		t.Fatalf("CreateDatabase: %v, want the CREATE's error", err)
	}
	if diff := cmp.Diff([]string{"CREATE DATABASE " + pgx.Identifier{catalog.PendingDatabaseName(tag)}.Sanitize()}, q.execs); diff != "" {
		t.Errorf("statements sent (-want +got):\n%s", diff)
	}
}

// failCreate fails every CREATE DATABASE with err, without sending it.
type failCreate struct {
	catalog.Querier
	err   error
	execs []string
}

func (f *failCreate) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	f.execs = append(f.execs, sql)
	if strings.HasPrefix(sql, "CREATE DATABASE") {
		return pgconn.CommandTag{}, f.err
	}
	return f.Querier.Exec(ctx, sql, args...)
}

// TestDropDatabaseInUse proves a database with a session is a Conflict
// saying what to do, is not dropped and no session is terminated, and is
// dropped once the session has gone.
func TestDropDatabaseInUse(t *testing.T) {
	ctx := t.Context()
	conn := connect(t, "postgres")
	name, tag := unique("busy_db_"), unique("finale:busy-")
	if err := catalog.CreateDatabase(ctx, conn, catalog.DatabaseSpec{Name: name}, tag); err != nil {
		t.Fatal(err)
	}
	user := connect(t, name)
	mustExec(t, user, "CREATE TABLE precious (v text); INSERT INTO precious VALUES ('data')")

	err := catalog.DropDatabase(ctx, conn, name, tag)
	if got, want := reason(err), catalog.ReasonInUse; got != want {
		t.Fatalf("DropDatabase = %v (reason %q), want reason %q", err, got, want)
	}
	if !errors.Is(err, catalog.ErrConflict) {
		t.Errorf("%v does not match ErrConflict", err)
	}
	if got := errclass.New(catalog.Classify).Classify(ctx, err); got != errclass.Conflict {
		t.Errorf("class %q, want %q", got, errclass.Conflict)
	}
	for _, want := range []string{"is in use", "other session", "disconnect the sessions using it", "never terminates sessions"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not contain %q", err, want)
		}
	}
	var v string
	if err := user.QueryRow(ctx, "SELECT v FROM precious").Scan(&v); err != nil || v != "data" {
		t.Fatalf("the user's session after the refused drop: %q, %v", v, err)
	}

	if err := user.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The server ends the backend of a closed connection asynchronously.
	err = controlplane.WaitFor(ctx, 20*time.Second, "the drop to succeed once the session is gone", func(ctx context.Context) (bool, error) {
		err := catalog.DropDatabase(ctx, conn, name, tag)
		if reason(err) == catalog.ReasonInUse {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := catalog.ObserveDatabase(ctx, conn, name); err != nil || ok {
		t.Errorf("after drop: exists=%v err=%v", ok, err)
	}
}

// TestQuotingWithoutStandardConformingStrings proves tags with backslashes
// and quotes round-trip even on a session where backslashes in ordinary
// string constants are escapes.
func TestQuotingWithoutStandardConformingStrings(t *testing.T) {
	ctx := t.Context()
	conn := connect(t, "postgres")
	mustExec(t, conn, "SET standard_conforming_strings = off")
	for caseName, tag := range map[string]string{
		"backslash quote": `a\'; DROP ROLE victim; --`,
		"trailing slash":  `finale:x\`,
		"escapes":         `\n\t\\ ''`,
	} {
		t.Run(caseName, func(t *testing.T) {
			name := unique("scs_off_")
			if err := catalog.CreateRole(ctx, conn, catalog.RoleSpec{Name: name, ConnectionLimit: -1}, tag); err != nil {
				t.Fatalf("CreateRole: %v", err)
			}
			r, ok, err := catalog.ObserveRole(ctx, conn, name)
			if err != nil || !ok {
				t.Fatalf("ObserveRole: ok=%v err=%v", ok, err)
			}
			if diff := cmp.Diff(tag, r.Tag); diff != "" {
				t.Errorf("tag (-want +got):\n%s", diff)
			}
			if err := catalog.DropRole(ctx, conn, name, tag); err != nil {
				t.Errorf("DropRole: %v", err)
			}
		})
	}
}
