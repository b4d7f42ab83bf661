package pgsplice

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// slowWrites makes each write of the splicer's login to the other server
// return late, after the server has had time to answer it, as a write
// does when the process is starved of CPU. pgconn then reads in the
// background during the login, and its last such read is still pending on
// the socket when the login is done and the connection handed over.
type slowWrites struct{ net.Conn }

func (c slowWrites) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	time.Sleep(100 * time.Millisecond) // the condition under test: a late write, not a wait for one
	return n, err
}

// A diverted statement gets its answer even when the splicer's login to
// the other server left a background read pending: before the fix, that
// read took the answer from the socket and the session hung for good
// (TestSessionMovedToACopyConfirmsNothing, 35 minutes in a cold make test).
func TestAnswerAfterASlowLogin(t *testing.T) {
	pg := testenv.Postgres(t)
	s, err := New(Options{Primary: pg.Addr(), Other: pg.DSN(), Divert: func(sql string) bool { return sql == "SELECT 42" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	dial := s.other.DialFunc
	s.other.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return slowWrites{c}, nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, pg.DSNVia(s.Addr(), "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for i := range 3 {
		res, err := conn.Exec(ctx, "SELECT 42").ReadAll()
		if err != nil {
			t.Fatalf("query %d through the splicer: %v", i, err)
		}
		if got := string(res[0].Rows[0][0]); got != "42" {
			t.Fatalf("query %d answered %q, want 42", i, got)
		}
	}
	if got := s.Diverted(); got != 3 {
		t.Errorf("diverted %d statements, want 3", got)
	}
}
