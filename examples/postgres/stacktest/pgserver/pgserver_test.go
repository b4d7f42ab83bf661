package pgserver_test

import (
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/finale-dev/finale/pgserver"
)

func TestServerRolesDatabasesAndIdentity(t *testing.T) {
	ctx := t.Context()
	s, err := pgserver.Start(ctx, pgserver.Options{Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	dir := s.Dir()
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("Stop left %s behind (stat: %v)", dir, err)
		}
	})

	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	for _, stmt := range []string{
		`CREATE ROLE app_user LOGIN PASSWORD 'x'`,
		`CREATE DATABASE app_db OWNER app_user`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	var roles, dbs int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname = 'app_user'`).Scan(&roles); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = 'app_db'`).Scan(&dbs); err != nil {
		t.Fatal(err)
	}
	if roles != 1 || dbs != 1 {
		t.Fatalf("after create: roles=%d databases=%d, want 1 and 1", roles, dbs)
	}
	for _, stmt := range []string{`DROP DATABASE app_db`, `DROP ROLE app_user`} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname = 'app_user'`).Scan(&roles); err != nil {
		t.Fatal(err)
	}
	if roles != 0 {
		t.Fatalf("role still there after DROP ROLE")
	}

	var id int64
	if err := conn.QueryRow(ctx, `SELECT system_identifier FROM pg_control_system()`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if id == 0 {
		t.Fatal("system_identifier is 0")
	}
}

func TestWrongPasswordRefused(t *testing.T) {
	ctx := t.Context()
	s, err := pgserver.Start(ctx, pgserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	dsn := strings.Replace(s.DSN(), ":"+s.Password+"@", ":wrong@", 1)
	if conn, err := pgx.Connect(ctx, dsn); err == nil {
		conn.Close(ctx)
		t.Fatal("connected with a wrong password: authentication is not enforced")
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
