package faultinject_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/finale-dev/finale/faultinject"
)

func newLagProxy(t *testing.T, target string) *faultinject.LagProxy {
	t.Helper()
	p, err := faultinject.NewLagProxy(target)
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

// The lag is a pipeline: each echo comes back no sooner than the lag after
// it was sent, and a burst comes back in about one lag, not one per line
// (Proxy.SetLatency would take 20 lags for 20 lines).
func TestLagPipelines(t *testing.T) {
	const lag, n = 300 * time.Millisecond, 20
	p := newLagProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	mustEcho(t, c, "warm")
	p.SetLag(lag)
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	sent := make([]time.Time, n)
	for i := range n {
		sent[i] = time.Now()
		if _, err := fmt.Fprintf(c, "line %d\n", i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		got, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("line %d\n", i); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		if since := time.Since(sent[i]); since < lag {
			t.Errorf("line %d back after %s, before the lag of %s", i, since, lag)
		}
	}
	if total := time.Since(sent[0]); total > n*lag/2 {
		t.Errorf("%d lines took %s: the lag is applied one chunk after another, not as a pipeline", n, total)
	}
	p.SetLag(0)
	mustEcho(t, c, "fresh")
}

// Lowering the lag releases what it holds.
func TestLagLoweredReleases(t *testing.T) {
	p := newLagProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	mustEcho(t, c, "warm")
	p.SetLag(time.Hour)
	if _, err := io.WriteString(c, "held\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := c.r.ReadString('\n'); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read under an hour's lag: %v, want a timeout", err)
	}
	p.SetLag(0)
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := c.r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after the lag was lowered: %q, %v", got, err)
	}
}

// A partition holds established connections silent in both directions and
// refuses new ones; healing delivers what was held and accepts again.
func TestLagPartition(t *testing.T) {
	p := newLagProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	mustEcho(t, c, "before")
	p.Partition(true)
	_, err := c.roundTrip("held", 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("round trip across the partition: %v, want a timeout", err)
	}
	// A new connection is reset at once: the dial itself may see it.
	if fresh, err := net.Dial("tcp", p.Addr()); err == nil {
		defer fresh.Close()
		_ = fresh.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fresh.Read(make([]byte, 1)); err == nil {
			t.Fatal("a new connection across the partition was served")
		}
	}
	p.Partition(false)
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := c.r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("held line after healing: %q, %v", got, err)
	}
	mustEcho(t, dial(t, p.Addr()), "after")
}

// prefixServer answers each line with name and the line.
func prefixServer(t *testing.T, name string) string {
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
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, name+":"+l); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// Retarget resets what is established and sends new connections to the
// new target, as a load balancer failing over.
func TestLagRetarget(t *testing.T) {
	a, b := prefixServer(t, "a"), prefixServer(t, "b")
	p := newLagProxy(t, a)
	old := dial(t, p.Addr())
	if got, err := old.roundTrip("x", 10*time.Second); err != nil || got != "a:x" {
		t.Fatalf("before failover: %q, %v", got, err)
	}
	n, err := p.Retarget(b)
	if err != nil || n != 1 {
		t.Fatalf("Retarget reset %d, %v; want 1", n, err)
	}
	if _, err := old.roundTrip("y", 10*time.Second); err == nil {
		t.Fatal("the connection to the old target still works after failover")
	}
	if got, err := dial(t, p.Addr()).roundTrip("z", 10*time.Second); err != nil || !strings.HasPrefix(got, "b:") {
		t.Fatalf("after failover: %q, %v", got, err)
	}
	if _, err := p.Retarget("nonsense"); err == nil {
		t.Fatal("Retarget accepted a target that is not host:port")
	}
}
