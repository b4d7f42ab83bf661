package faultinject_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/finale-dev/finale/faultinject"
)

// echoServer echoes lines on loopback until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *faultinject.Proxy {
	t.Helper()
	p, err := faultinject.NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{Conn: c, r: bufio.NewReader(c)}
}

// roundTrip sends a line and reads it back within timeout.
func (c *conn) roundTrip(line string, timeout time.Duration) (string, error) {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := c.r.ReadString('\n')
	if len(got) > 0 {
		got = got[:len(got)-1]
	}
	return got, err
}

func mustEcho(t *testing.T, c *conn, line string) {
	t.Helper()
	got, err := c.roundTrip(line, 10*time.Second)
	if err != nil || got != line {
		t.Fatalf("echo %q: got %q, %v", line, got, err)
	}
}

func TestProxyForwards(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p.Addr())
	mustEcho(t, c, "hello")
	mustEcho(t, c, "again")
	if got := p.Accepted(); got != 1 {
		t.Errorf("Accepted: got %d, want 1", got)
	}
	if got := p.Active(); got != 1 {
		t.Errorf("Active: got %d, want 1", got)
	}
}

// TestFreezeEstablishedAcceptNew is the seed's half-broken client: the old
// connection swallows requests, a new one works, Thaw delivers what was held.
func TestFreezeEstablishedAcceptNew(t *testing.T) {
	p := newProxy(t)
	old := dial(t, p.Addr())
	mustEcho(t, old, "before")

	if got := p.Freeze(); got != 1 {
		t.Fatalf("Freeze froze %d connections, want 1", got)
	}
	_, err := old.roundTrip("swallowed", 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("frozen round trip: got %v, want a timeout", err)
	}

	fresh := dial(t, p.Addr())
	mustEcho(t, fresh, "new connections work")
	if got := p.Accepted(); got != 2 {
		t.Errorf("Accepted: got %d, want 2", got)
	}

	p.Thaw()
	if err := old.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := old.r.ReadString('\n')
	if err != nil || got != "swallowed\n" {
		t.Fatalf("after Thaw: got %q, %v; want the held bytes", got, err)
	}
	mustEcho(t, old, "thawed")
}

func TestResetAll(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p.Addr())
	mustEcho(t, c, "x")
	if got := p.ResetAll(); got != 1 {
		t.Fatalf("ResetAll reset %d, want 1", got)
	}
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := c.r.ReadByte()
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after ResetAll: got %v, want ECONNRESET", err)
	}
	mustEcho(t, dial(t, p.Addr()), "new after reset")
}

func TestRefuse(t *testing.T) {
	p := newProxy(t)
	established := dial(t, p.Addr())
	mustEcho(t, established, "x")

	p.Refuse(true)
	// The reset follows the accept at once: on a loaded machine it may
	// reach the dial itself, before connect returns.
	if c, err := net.Dial("tcp", p.Addr()); err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("dial while refusing: got %v, want success or ECONNRESET", err)
		}
	} else {
		refused := &conn{Conn: c, r: bufio.NewReader(c)}
		t.Cleanup(func() { c.Close() })
		if _, err := refused.roundTrip("no", 10*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("refused connection: got %v, want reset or EOF", err)
		}
	}
	if got := p.Refused(); got != 1 {
		t.Errorf("Refused: got %d, want 1", got)
	}
	mustEcho(t, established, "established unaffected")

	p.Refuse(false)
	mustEcho(t, dial(t, p.Addr()), "accepted again")
}

func TestSetLatency(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p.Addr())
	const d = 150 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	mustEcho(t, c, "slow")
	// One chunk each way, each delayed by d.
	if got := time.Since(start); got < 2*d {
		t.Errorf("round trip took %v, want at least %v", got, 2*d)
	}
	p.SetLatency(0)
	mustEcho(t, c, "fast")
}

func TestCloseEndsEverything(t *testing.T) {
	p, err := faultinject.NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	mustEcho(t, c, "x")
	p.Freeze()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.r.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Close: got %v, want EOF or reset", err)
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("dial after Close succeeded")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestNewProxyRejectsBadTarget(t *testing.T) {
	if _, err := faultinject.NewProxy("no-port"); err == nil {
		t.Fatal("NewProxy accepted a target without a port")
	}
}

func TestUnreachableTargetResetsClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()
	p, err := faultinject.NewProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The reset may even reach the client during connect on loopback.
	nc, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return
	}
	defer nc.Close()
	c := &conn{Conn: nc, r: bufio.NewReader(nc)}
	if _, err := c.roundTrip("x", 10*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want reset or EOF", err)
	}
}
