package clientpool_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/pgserver"
)

// pgKey is a PostgreSQL connection identity.
type pgKey struct {
	Addr, User, Database string
}

type pgFixture struct {
	proxy         *faultinject.Proxy
	dials, closes atomic.Int64
	// password returns the password for a user, read per dial.
	password func(user string) string
}

// counts is what a real-transport test asserts after each step.
type counts struct {
	Dials, Closes, Accepted int64
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var poolSeq atomic.Int64

// uniqueName names each pool apart, so their metrics do not collide.
func uniqueName(*testing.T) string {
	return fmt.Sprintf("pg-test-%d", poolSeq.Add(1))
}

func (f *pgFixture) counts() counts {
	return counts{Dials: f.dials.Load(), Closes: f.closes.Load(), Accepted: f.proxy.Accepted()}
}

func newPGFixture(t *testing.T) *pgFixture {
	t.Helper()
	pg := testenv.Postgres(t)
	proxy, err := faultinject.NewProxy(pg.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	return &pgFixture{proxy: proxy, password: func(string) string { return pg.Password }}
}

func (f *pgFixture) pool(t *testing.T) *clientpool.Pool[pgKey, *pgx.Conn] {
	t.Helper()
	p, err := clientpool.New(clientpool.Options[pgKey, *pgx.Conn]{
		Name: uniqueName(t),
		Dial: clientpool.DialFn[pgKey, *pgx.Conn](func(ctx context.Context, k pgKey) (*pgx.Conn, error) {
			f.dials.Add(1)
			u := url.URL{Scheme: "postgres", User: url.UserPassword(k.User, f.password(k.User)), Host: k.Addr, Path: "/" + k.Database, RawQuery: "sslmode=disable"}
			return pgx.Connect(ctx, u.String())
		}),
		Close: clientpool.CloseFn[*pgx.Conn](func(c *pgx.Conn) error {
			f.closes.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return c.Close(ctx)
		}),
		CallTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func exec(sql string) func(ctx context.Context, c *pgx.Conn) error {
	return func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, sql)
		return err
	}
}

func TestPostgresFrozenConnectionEvictsAndRedials(t *testing.T) {
	f := newPGFixture(t)
	p := f.pool(t)
	key := pgKey{Addr: f.proxy.Addr(), User: pgserver.AdminUser, Database: "postgres"}
	ctx := t.Context()

	firstPID := backendPID(t, p, key)
	if n := f.proxy.Freeze(); n != 1 {
		t.Fatalf("froze %d connections, want 1", n)
	}
	err := p.Do(ctx, key, exec("SELECT 1"))
	if err == nil || errclass.Of(ctx, err) != errclass.Transport {
		t.Fatalf("query on frozen connection: got %v (class %s), want a Transport error", err, errclass.Of(ctx, err))
	}
	// pgx sends its cancel request over a new connection, so the proxy may
	// have accepted more than the frozen one by now: compare dials and
	// closes exactly, connections as a lower bound.
	if diff := cmp.Diff([2]int64{1, 1}, [2]int64{f.dials.Load(), f.closes.Load()}); diff != "" {
		t.Fatalf("dials, closes (-want +got):\n%s", diff)
	}
	if pid := backendPID(t, p, key); pid == firstPID {
		t.Errorf("recovered call ran on the frozen session (backend %d)", pid)
	}
	if diff := cmp.Diff([2]int64{2, 1}, [2]int64{f.dials.Load(), f.closes.Load()}); diff != "" {
		t.Fatalf("recovery must go through a fresh dial; dials, closes (-want +got):\n%s", diff)
	}
}

func backendPID(t *testing.T, p *clientpool.Pool[pgKey, *pgx.Conn], key pgKey) int32 {
	t.Helper()
	var pid int32
	mustDo(t, p.Do(t.Context(), key, func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	}))
	return pid
}

// TestPostgresAuthErrorEvicts: insufficient_privilege (42501) from a real
// server evicts the connection of an unprivileged role.
func TestPostgresAuthErrorEvicts(t *testing.T) {
	f := newPGFixture(t)
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, testenv.Postgres(t).DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	role := fmt.Sprintf("g1_limited_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'limited'`, role)); err != nil {
		t.Fatal(err)
	}
	f.password = func(string) string { return "limited" }
	p := f.pool(t)
	key := pgKey{Addr: f.proxy.Addr(), User: role, Database: "postgres"}

	err = p.Do(ctx, key, exec("SELECT * FROM pg_authid"))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("got %v, want SQLSTATE 42501", err)
	}
	if diff := cmp.Diff(counts{1, 1, 1}, f.counts()); diff != "" {
		t.Fatalf("auth error must evict and close (-want +got):\n%s", diff)
	}
	mustDo(t, p.Do(ctx, key, exec("SELECT 1")))
	if diff := cmp.Diff(counts{2, 1, 2}, f.counts()); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// TestPostgresNotFoundKeepsClient: undefined_object (42704) is an answer.
func TestPostgresNotFoundKeepsClient(t *testing.T) {
	f := newPGFixture(t)
	p := f.pool(t)
	key := pgKey{Addr: f.proxy.Addr(), User: pgserver.AdminUser, Database: "postgres"}
	ctx := t.Context()
	err := p.Do(ctx, key, exec("DROP ROLE g1_no_such_role"))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42704" {
		t.Fatalf("got %v, want SQLSTATE 42704", err)
	}
	mustDo(t, p.Do(ctx, key, exec("SELECT 1")))
	if diff := cmp.Diff(counts{1, 0, 1}, f.counts()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestPostgresDialFailureNotCached: a refused dial is returned, classified
// Transport, and the next Do dials again.
func TestPostgresDialFailureNotCached(t *testing.T) {
	f := newPGFixture(t)
	p := f.pool(t)
	key := pgKey{Addr: f.proxy.Addr(), User: pgserver.AdminUser, Database: "postgres"}
	ctx := t.Context()
	f.proxy.Refuse(true)
	err := p.Do(ctx, key, exec("SELECT 1"))
	if err == nil || errclass.Of(ctx, err) != errclass.Transport {
		t.Fatalf("got %v (class %s), want a Transport dial error", err, errclass.Of(ctx, err))
	}
	f.proxy.Refuse(false)
	mustDo(t, p.Do(ctx, key, exec("SELECT 1")))
	if got := f.dials.Load(); got != 2 {
		t.Errorf("dials: got %d, want 2", got)
	}
}

// TestPostgresWrongPasswordIsAuth: a real SCRAM failure at dial is
// classified Auth and is not cached; the right password then works.
func TestPostgresWrongPasswordIsAuth(t *testing.T) {
	f := newPGFixture(t)
	right := f.password("")
	var wrong atomic.Bool
	wrong.Store(true)
	f.password = func(string) string {
		if wrong.Load() {
			return "not-" + right
		}
		return right
	}
	p := f.pool(t)
	key := pgKey{Addr: f.proxy.Addr(), User: pgserver.AdminUser, Database: "postgres"}
	ctx := t.Context()
	err := p.Do(ctx, key, exec("SELECT 1"))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28P01" || errclass.Of(ctx, err) != errclass.Auth {
		t.Fatalf("got %v (class %s), want SQLSTATE 28P01 classified Auth", err, errclass.Of(ctx, err))
	}
	wrong.Store(false)
	mustDo(t, p.Do(ctx, key, exec("SELECT 1")))
	if diff := cmp.Diff([2]int64{2, 0}, [2]int64{f.dials.Load(), f.closes.Load()}); diff != "" {
		t.Errorf("dials, closes (-want +got):\n%s", diff)
	}
}
