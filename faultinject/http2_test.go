package faultinject_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/finale-dev/finale/faultinject"
)

// grpcBackend is a real gRPC server on loopback (the standard health
// service) behind an HTTP/2-aware proxy.
func grpcBackend(t *testing.T) *faultinject.Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	p, err := faultinject.NewHTTP2Proxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The proxy first: Stop waits for connections a stalled proxy
		// would hold open.
		if err := p.Close(); err != nil {
			t.Error(err)
		}
		srv.Stop()
	})
	return p
}

func grpcClient(t *testing.T, addr string) (*grpc.ClientConn, healthpb.HealthClient) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc, healthpb.NewHealthClient(cc)
}

func checkHealth(ctx context.Context, hc healthpb.HealthClient, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestHTTP2ProxyForwardsGRPC(t *testing.T) {
	p := grpcBackend(t)
	_, hc := grpcClient(t, p.Addr())
	for range 3 {
		if err := checkHealth(t.Context(), hc, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Accepted(); got != 1 {
		t.Errorf("Accepted() = %d, want 1 (one HTTP/2 connection for every call)", got)
	}
}

// TestStallTimesOutCallsOnALiveConnection is the fault in one test: after
// Stall the established connection stays READY and every call on it times
// out, while a new connection is served.
func TestStallTimesOutCallsOnALiveConnection(t *testing.T) {
	p := grpcBackend(t)
	cc, hc := grpcClient(t, p.Addr())
	if err := checkHealth(t.Context(), hc, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	n, err := p.Stall()
	if err != nil || n != 1 {
		t.Fatalf("Stall() = %d, %v; want 1, nil", n, err)
	}
	for i := range 3 {
		err := checkHealth(t.Context(), hc, 300*time.Millisecond)
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("call %d on the stalled connection: %v, want DeadlineExceeded", i, err)
		}
	}
	if s := cc.GetState(); s != connectivity.Ready {
		t.Errorf("stalled connection state %s, want READY: it must look alive", s)
	}
	_, fresh := grpcClient(t, p.Addr())
	if err := checkHealth(t.Context(), fresh, 5*time.Second); err != nil {
		t.Fatalf("a new connection must be served: %v", err)
	}
	if got, want := p.Accepted(), int64(2); got != want {
		t.Errorf("Accepted() = %d, want %d", got, want)
	}
}

// TestStallAnswersPingAndSettings speaks HTTP/2 directly (x/net/http2's
// framer, not the proxy's own parser): a stalled connection acknowledges
// PING with the same payload and SETTINGS, and nothing the server sends
// gets through.
func TestStallAnswersPingAndSettings(t *testing.T) {
	p := grpcBackend(t)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The server's SETTINGS come through the healthy connection.
	if f, err := fr.ReadFrame(); err != nil {
		t.Fatal(err)
	} else if _, ok := f.(*http2.SettingsFrame); !ok {
		t.Fatalf("first server frame %T, want SETTINGS", f)
	}
	// The server's frame came through, so the link is registered and
	// known to speak HTTP/2.
	if n, err := p.Stall(); err != nil || n != 1 {
		t.Fatalf("Stall() = %d, %v; want 1, nil", n, err)
	}
	payload := [8]byte{'f', 'i', 'n', 'a', 'l', 'e', 0, 1}
	if err := fr.WritePing(false, payload); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 15}); err != nil {
		t.Fatal(err)
	}
	var gotPing, gotSettingsAck bool
	for !gotPing || !gotSettingsAck {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the proxy's answers: %v (ping %v, settings ack %v)", err, gotPing, gotSettingsAck)
		}
		switch f := f.(type) {
		case *http2.PingFrame:
			if !f.IsAck() || f.Data != payload {
				t.Fatalf("PING answer %+v, want an ACK of %v", f, payload)
			}
			gotPing = true
		case *http2.SettingsFrame:
			// The server's ACK of the first SETTINGS may still be on its
			// way from before the stall; the proxy's own comes too.
			if f.IsAck() && gotPing {
				gotSettingsAck = true
			}
		}
	}
	if got := p.PingsAnswered(); got != 1 {
		t.Errorf("PingsAnswered() = %d, want 1", got)
	}
}

func TestStallNeedsHTTP2Proxy(t *testing.T) {
	p := newProxy(t)
	if _, err := p.Stall(); !errors.Is(err, faultinject.ErrNotHTTP2) {
		t.Fatalf("Stall on a plain proxy: %v, want ErrNotHTTP2", err)
	}
}

// TestHTTP2ProxyForwardsOtherProtocols: a connection that does not open
// with the HTTP/2 preface is forwarded byte for byte, even when its first
// message is shorter than the preface, and Stall leaves it alone.
func TestHTTP2ProxyForwardsOtherProtocols(t *testing.T) {
	p, err := faultinject.NewHTTP2Proxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := dial(t, p.Addr())
	for _, line := range []string{"hi", "PRI is not enough", "again"} {
		got, err := c.roundTrip(line, 5*time.Second)
		if err != nil || got != line {
			t.Fatalf("roundTrip(%q) = %q, %v", line, got, err)
		}
	}
	if n, err := p.Stall(); err != nil || n != 0 {
		t.Fatalf("Stall() = %d, %v; want 0 stalled, nil", n, err)
	}
	if got, err := c.roundTrip("after", 5*time.Second); err != nil || got != "after" {
		t.Fatalf("after Stall: %q, %v", got, err)
	}
}

// TestHTTP2ProxyFreezeThawAndReset: the other faults keep their meaning on
// the frame-aware proxy.
func TestHTTP2ProxyFreezeThawAndReset(t *testing.T) {
	p := grpcBackend(t)
	cc, hc := grpcClient(t, p.Addr())
	if err := checkHealth(t.Context(), hc, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.Freeze(); n != 1 {
		t.Fatalf("Freeze() = %d, want 1", n)
	}
	if err := checkHealth(t.Context(), hc, 300*time.Millisecond); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("frozen: %v, want DeadlineExceeded", err)
	}
	p.Thaw()
	if err := checkHealth(t.Context(), hc, 5*time.Second); err != nil {
		t.Fatalf("thawed: %v", err)
	}
	if n := p.ResetAll(); n != 1 {
		t.Fatalf("ResetAll() = %d, want 1", n)
	}
	// gRPC notices the reset, redials, and the call waits for that.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if !cc.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatal("the reset connection still looks READY")
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("no recovery after ResetAll: %v", err)
	}
	if got := p.Accepted(); got != 2 {
		t.Errorf("Accepted() = %d, want 2 (the reset connection and its redial)", got)
	}
}
