package pgserver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/finale-dev/finale/pgserver"
)

// A server started with Options.TLS serves the certificate its CA issued:
// a client pinning that CA connects with verify-full, one pinning another
// CA, or expecting another host name, is refused; plain connections still
// work; and a Copy, like a pg_basebackup, has the data but not the key,
// which lives outside the data directory, so it serves no TLS.
func TestTLS(t *testing.T) {
	ctx := t.Context()
	ca, err := pgserver.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := pgserver.Start(ctx, pgserver.Options{Log: testWriter{t}, TLS: &cert})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	other, err := pgserver.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pin := func(name string, pem []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ours, theirs := pin("ca.crt", ca.CertPEM), pin("other.crt", other.CertPEM)
	connect := func(srv *pgserver.Server, params string) error {
		dsn := strings.Replace(srv.DSN(), "sslmode=disable", params, 1)
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		var ssl bool
		err = conn.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl)
		_ = conn.Close(ctx)
		if err == nil && !ssl && !strings.Contains(params, "disable") {
			t.Errorf("%s: connected without TLS", params)
		}
		return err
	}
	if err := connect(s, "sslmode=verify-full&sslrootcert="+ours); err != nil {
		t.Errorf("verify-full against the server's CA: %v", err)
	}
	if err := connect(s, "sslmode=disable"); err != nil {
		t.Errorf("plain connection: %v", err)
	}
	if err := connect(s, "sslmode=verify-full&sslrootcert="+theirs); err == nil {
		t.Error("verify-full against another CA connected")
	}
	byName := strings.Replace(s.DSN(), "127.0.0.1", "localhost", 1) // a name the certificate does not hold
	byName = strings.Replace(byName, "sslmode=disable", "sslmode=verify-full&sslrootcert="+ours, 1)
	if conn, err := pgx.Connect(ctx, byName); err == nil {
		_ = conn.Close(ctx)
		t.Error("verify-full for a host name the certificate does not hold connected")
	}

	cp, err := s.Copy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	if err := connect(cp, "sslmode=disable"); err != nil {
		t.Errorf("plain connection to the copy: %v", err)
	}
	if err := connect(cp, "sslmode=require"); err == nil {
		t.Error("the copy serves TLS: it carried the original's key")
	}
}
