package clientpool_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/faultinject"
)

// servingService is the health service name the backend reports SERVING.
const servingService = "finale.test.Cleanup"

// backend is a real gRPC server on loopback (the standard health service)
// that demands a bearer token, behind a fault proxy.
type backend struct {
	proxy *faultinject.Proxy
	// token is the bearer token the server accepts.
	token atomic.Pointer[string]
}

func newBackend(t testing.TB, token string) *backend {
	t.Helper()
	b := &backend{}
	b.token.Store(&token)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(b.authorize))
	hs := health.NewServer()
	hs.SetServingStatus(servingService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(ln) }()
	b.proxy, err = faultinject.NewProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The proxy first: Stop waits for connections that a frozen
		// proxy would hold open.
		_ = b.proxy.Close()
		srv.Stop()
	})
	return b
}

func (b *backend) authorize(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+*b.token.Load() {
		return nil, status.Error(codes.Unauthenticated, "bad bearer token")
	}
	return h(ctx, req)
}

// endpoint is a gRPC connection identity: what the client is bound to at
// dial time. The token is not part of it: it is read per call.
type endpoint struct {
	Addr       string
	SecretName string
}

// perCallToken reads the bearer token on every RPC, so rotation needs no
// redial (the pattern of the upstream fix "read API key on every RPC").
type perCallToken func(ctx context.Context) (string, error)

func (f perCallToken) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	tok, err := f(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "read token: %v", err)
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (perCallToken) RequireTransportSecurity() bool { return false }

// grpcCounters counts dials and closes of real gRPC clients.
type grpcCounters struct {
	dials, closes atomic.Int64
}

func (gc *grpcCounters) options(name string, token perCallToken) clientpool.Options[endpoint, *grpc.ClientConn] {
	return clientpool.Options[endpoint, *grpc.ClientConn]{
		Name: name,
		Dial: clientpool.DialFn[endpoint, *grpc.ClientConn](func(_ context.Context, k endpoint) (*grpc.ClientConn, error) {
			gc.dials.Add(1)
			return grpc.NewClient("passthrough:///"+k.Addr,
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithPerRPCCredentials(token))
		}),
		Close: clientpool.CloseFn[*grpc.ClientConn](func(c *grpc.ClientConn) error {
			gc.closes.Add(1)
			return c.Close()
		}),
	}
}

func check(service string) func(ctx context.Context, c *grpc.ClientConn) error {
	return func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		return err
	}
}

func staticToken(tok string) perCallToken {
	return func(context.Context) (string, error) { return tok, nil }
}
