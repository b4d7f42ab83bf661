package errclass_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/pgserver"
)

// TestMain shares one PostgreSQL server among the tests.
func TestMain(m *testing.M) { testenv.Main(m) }

// refusedAddr is a loopback address with nothing listening.
func refusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestPgxErrors classifies the errors pgx really returns, against a real
// server, although errclass does not import pgx: SQLSTATE through
// SQLState(), and pgconn's connect, parse and closed-connection errors by
// their type names.
func TestPgxErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pg := testenv.Postgres(t)

	conn, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	_, syntaxErr := conn.Exec(ctx, "SELEC 1")
	_, undefinedErr := conn.Exec(ctx, "DROP ROLE finale_no_such_role")
	_, canceledErr := conn.Exec(ctx, "SET statement_timeout = '1ms'; SELECT pg_sleep(1)")
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, closedErr := conn.Exec(ctx, "SELECT 1")

	_, refusedErr := pgconn.Connect(ctx, "postgres://nobody@"+refusedAddr(t)+"/x?sslmode=disable&connect_timeout=5")
	_, parseErr := pgconn.ParseConfig("postgres://a b c:%zz")
	_, authErr := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:wrong@%s/postgres?sslmode=disable", pgserver.AdminUser, pg.Addr()))

	cases := map[string]struct {
		err  error
		want errclass.Class
	}{
		"syntax error 42601":               {syntaxErr, errclass.Invalid},
		"undefined role 42704":             {undefinedErr, errclass.NotFound},
		"statement timeout 57014":          {canceledErr, errclass.Canceled},
		"exec on a closed connection":      {closedErr, errclass.Transport},
		"connect refused (ConnectError)":   {refusedErr, errclass.Transport},
		"bad DSN (ParseConfigError)":       {parseErr, errclass.Invalid},
		"wrong password 28P01":             {authErr, errclass.Auth},
		"SQLSTATE of pgconn.PgError 53300": {&pgconn.PgError{Code: "53300"}, errclass.Throttled},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("pgx returned no error")
			}
			if diff := cmp.Diff(tc.want, errclass.Of(t.Context(), tc.err)); diff != "" {
				t.Errorf("Of(%T %v) (-want +got):\n%s", tc.err, tc.err, diff)
			}
			if diff := cmp.Diff(tc.want, errclass.Of(t.Context(), fmt.Errorf("cleanup: %w", tc.err))); diff != "" {
				t.Errorf("wrapped (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPgxIdentityErrors: what pgx returns when the server's certificate
// does not verify, against a real server serving TLS with a certificate
// for 127.0.0.1 from a CA of the test's own, is Identity, not Auth (issue
// 36, item 11): the login was never attempted, and an admin sent to the
// password would change the wrong thing. A wrong password stays Auth.
func TestPgxIdentityErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ca, err := pgserver.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pg, err := pgserver.Start(ctx, pgserver.Options{TLS: &cert})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	dsn := func(user, pass, host, mode string) string {
		return fmt.Sprintf("postgres://%s:%s@%s:%d/postgres?sslmode=%s&connect_timeout=5", user, pass, host, pg.Port, mode)
	}
	_, unknownCA := pgx.Connect(ctx, dsn(pgserver.AdminUser, pg.Password, "127.0.0.1", "verify-full"))
	_, wrongHost := pgx.Connect(ctx, dsn(pgserver.AdminUser, pg.Password, "localhost", "verify-full")+"&sslrootcert=system")
	_, authErr := pgx.Connect(ctx, dsn(pgserver.AdminUser, "wrong", "127.0.0.1", "require"))
	for name, tc := range map[string]struct {
		err  error
		want errclass.Class
	}{
		"certificate of an unknown CA": {unknownCA, errclass.Identity},
		"certificate, system roots":    {wrongHost, errclass.Identity},
		"wrong password over TLS":      {authErr, errclass.Auth},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("pgx returned no error")
			}
			if diff := cmp.Diff(tc.want, errclass.Of(t.Context(), tc.err)); diff != "" {
				t.Errorf("Of(%T %v) (-want +got):\n%s", tc.err, tc.err, diff)
			}
		})
	}
}
