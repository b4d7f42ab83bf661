package clientpool_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/faultinject"
)

// lineServer answers each line it reads with "pong " and the line: a real
// request/response service on loopback.
type lineServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn // guarded by mu
}

func newLineServer(t *testing.T) *lineServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &lineServer{ln: ln}
	go s.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			_ = c.Close()
		}
	})
	return s
}

func (s *lineServer) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		go func() {
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if _, err := io.WriteString(c, "pong "+line); err != nil {
					return
				}
			}
		}()
	}
}

// lineClient is a client that ignores its context: Call takes none and sets
// no deadline, as a Redis or SQL client with its context timeouts turned
// off does. Only closing its connection ends a read that gets no answer.
type lineClient struct {
	id     int64
	conn   net.Conn
	r      *bufio.Reader
	closes atomic.Int32
}

func (c *lineClient) Call(req string) (string, error) {
	if _, err := io.WriteString(c.conn, req+"\n"); err != nil {
		return "", err
	}
	return c.r.ReadString('\n')
}

// lineClients dials lineClients to addr and counts dials and closes.
type lineClients struct {
	addr  string
	dials atomic.Int64
	mu    sync.Mutex
	all   []*lineClient // guarded by mu
}

func (f *lineClients) Dial(ctx context.Context, _ string) (*lineClient, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", f.addr)
	if err != nil {
		return nil, err
	}
	c := &lineClient{id: f.dials.Add(1), conn: conn, r: bufio.NewReader(conn)}
	f.mu.Lock()
	f.all = append(f.all, c)
	f.mu.Unlock()
	return c, nil
}

func (f *lineClients) Close(c *lineClient) error {
	c.closes.Add(1)
	return c.conn.Close()
}

// closes is how many times each client was closed, by dial number.
func (f *lineClients) closes() map[int64]int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int64]int32{}
	for _, c := range f.all {
		out[c.id] = c.closes.Load()
	}
	return out
}

// frozenStack is a line server behind the fault proxy and a pool of
// clients through it with CallTimeout; the first client is dialled and
// cached, then its connection frozen (it swallows requests until Thaw, the
// network healing; new connections work).
type frozenStack[C any] struct {
	name    string
	proxy   *faultinject.Proxy
	clients *lineClients
	pool    *clientpool.Pool[string, C]
}

// startFrozenStack makes the pool's Dial and Close with wrap, around the
// stack's lineClients, and freezes the client first dialled for ping.
func startFrozenStack[C any](t *testing.T, callTimeout time.Duration, wrap func(*lineClients) (clientpool.Dialer[string, C], clientpool.Closer[C]), ping func(context.Context, C) error) *frozenStack[C] {
	t.Helper()
	srv := newLineServer(t)
	proxy, err := faultinject.NewProxy(srv.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	s := &frozenStack[C]{name: uniqueName(t), proxy: proxy, clients: &lineClients{addr: proxy.Addr()}}
	dial, closer := wrap(s.clients)
	s.pool, err = clientpool.New(clientpool.Options[string, C]{Name: s.name, Dial: dial, Close: closer, CallTimeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.pool.Close() })
	if err := s.pool.Do(t.Context(), "k", ping); err != nil {
		t.Fatalf("first call: %v", err)
	}
	if n := proxy.Freeze(); n != 1 {
		t.Fatalf("froze %d connections, want the 1 cached", n)
	}
	return s
}

// startFrozenLineStack is a frozenStack of plain lineClients.
func startFrozenLineStack(t *testing.T, callTimeout time.Duration) *frozenStack[*lineClient] {
	t.Helper()
	return startFrozenStack(t, callTimeout, func(f *lineClients) (clientpool.Dialer[string, *lineClient], clientpool.Closer[*lineClient]) {
		return f, f
	}, ping)
}

func ping(_ context.Context, c *lineClient) error {
	got, err := c.Call("ping")
	if err == nil && got != "pong ping\n" {
		return errors.New("bad answer " + got)
	}
	return err
}

// TestDoAbandonsACallThatIgnoresItsContext is the go-redis wedge on
// the real stack: a client that ignores its context, its cached
// connection frozen by the proxy. Do returns Transport at the bound (not
// when fn does: fn would wait for ever), closes and evicts the client, which
// ends the stuck read; the next Do dials afresh and works. Before, Do waited
// for fn: the test hung.
func TestDoAbandonsACallThatIgnoresItsContext(t *testing.T) {
	const bound = time.Second
	s := startFrozenLineStack(t, bound)

	fnReturned := make(chan error, 1)
	start := time.Now()
	err := s.pool.Do(t.Context(), "k", func(ctx context.Context, c *lineClient) error {
		err := ping(ctx, c)
		fnReturned <- err
		return err
	})
	elapsed := time.Since(start)
	if got := errclass.Of(t.Context(), err); got != errclass.Transport || !errors.Is(err, errclass.ErrCallTimeout) {
		t.Fatalf("Do = %v (class %s), want Transport wrapping errclass.ErrCallTimeout", err, got)
	}
	// The grace is a twentieth of the bound; a second of slack for a
	// loaded machine.
	if elapsed < bound || elapsed > bound+bound/20+time.Second {
		t.Fatalf("Do returned after %v, want the bound %v and a little", elapsed, bound)
	}
	// Closing the client ended the abandoned read.
	select {
	case err := <-fnReturned:
		if err == nil {
			t.Fatal("the abandoned call succeeded on a frozen connection")
		}
	case <-time.After(seedWait):
		t.Fatal("the abandoned call did not return after its client was closed")
	}
	if diff := cmp.Diff(map[int64]int32{1: 1}, s.clients.closes()); diff != "" {
		t.Errorf("closes after the abandoned call returned (-want +got):\n%s", diff)
	}
	// The close runs on its own goroutine, counted once Close returns.
	waitFor(t, "the close to be counted", func() bool {
		return metricValue(t, "finale_clientpool_closes_total", s.name, "success") == 1
	})
	if err := s.pool.Do(t.Context(), "k", ping); err != nil {
		t.Fatalf("the next call: %v", err)
	}
	got := map[string]float64{
		"dials":               float64(s.clients.dials.Load()),
		"abandoned":           metricValue(t, "finale_clientpool_abandoned_total", s.name),
		"evictions Transport": metricValue(t, "finale_clientpool_evictions_total", s.name, "Transport"),
		"calls Transport":     metricValue(t, "finale_clientpool_calls_total", s.name, "Transport"),
		"calls OK":            metricValue(t, "finale_clientpool_calls_total", s.name, "OK"),
		"closes success":      metricValue(t, "finale_clientpool_closes_total", s.name, "success"),
	}
	want := map[string]float64{"dials": 2, "abandoned": 1, "evictions Transport": 1, "calls Transport": 1, "calls OK": 2, "closes success": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
