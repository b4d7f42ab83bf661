package pgsplice

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// lateWrites makes each write of the splicer's login to the other server
// return late, as a write does when the process is starved of CPU: only
// once the server's answer has been read and a next read has begun.
// pgconn reads in the background while a write seems slow, so that next
// read is its background reader's, still pending on the socket when the
// login is done (the server's ReadyForQuery) and the connection handed
// over. Writes after the login pass straight through.
type lateWrites struct {
	net.Conn
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every read begun or answered
	reads   int           // reads begun
	answers int           // reads that returned data
	atData  int           // reads begun when the last data was returned
	tail    []byte        // the last bytes read, to see the ReadyForQuery that ends the login
	login   bool
}

func newLateWrites(c net.Conn) *lateWrites {
	return &lateWrites{Conn: c, changed: make(chan struct{}), login: true}
}

// note applies f under the lock and wakes a waiting write.
func (c *lateWrites) note(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *lateWrites) Read(p []byte) (int, error) {
	c.note(func() { c.reads++ })
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.note(func() {
			c.answers++
			c.atData = c.reads
			c.tail = append(c.tail, p[:n]...)
			if len(c.tail) > 6 {
				c.tail = c.tail[len(c.tail)-6:]
			}
			// ReadyForQuery: 'Z', length 5, a status byte.
			if len(c.tail) == 6 && bytes.Equal(c.tail[:5], []byte{'Z', 0, 0, 0, 5}) {
				c.login = false
			}
		})
	}
	return n, err
}

func (c *lateWrites) Write(p []byte) (int, error) {
	c.mu.Lock()
	late, answers := c.login, c.answers
	c.mu.Unlock()
	n, err := c.Conn.Write(p)
	if !late || err != nil {
		return n, err
	}
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		done, changed := c.answers > answers && c.reads > c.atData, c.changed
		c.mu.Unlock()
		if done {
			return n, nil
		}
		select {
		case <-changed:
		case <-deadline:
			return n, errors.New("lateWrites: no answer read within 30s of a login write")
		}
	}
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
		return newLateWrites(c), nil
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
