package controller

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/pgserver"
)

// A PostgreSQL server that declines TLS under sslmode require is told
// apart from an address that speaks another protocol by the first byte it
// sends ('N'), not by pgx's error text: the first is an Identity failure,
// the second stays Transport, so that a Server's
// status still tells no ports apart. Real servers: a PostgreSQL of the
// test's own that serves no TLS (the package's shared one does), and a
// listener that answers as another protocol.
func TestDeclinedTLSIsIdentity(t *testing.T) {
	pg, err := pgserver.Start(t.Context(), pgserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\n\r\n")
			_ = c.Close()
		}
	}()
	connect := func(addr string) (declined bool, err error) {
		cfg, err := pgx.ParseConfig("postgres://u:p@" + addr + "/postgres?sslmode=require&connect_timeout=5")
		if err != nil {
			t.Fatal(err)
		}
		var seen replies
		cfg.DialFunc = seen.wrap(cfg.DialFunc)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			_ = c.Close(ctx)
			t.Fatalf("%s accepted sslmode require", addr)
		}
		return seen.declined.Load(), err
	}
	if declined, err := connect(pg.Addr()); !declined {
		t.Errorf("PostgreSQL without TLS: declined = false (%v), want true", err)
	}
	if declined, err := connect(l.Addr().String()); declined {
		t.Errorf("a port speaking another protocol: declined = true (%v), want false", err)
	}
	if got := errclass.Of(t.Context(), errors.Join(errclass.ErrNoTLS)); got != errclass.Identity {
		t.Errorf("ErrNoTLS classifies as %s, want Identity", got)
	}
}
