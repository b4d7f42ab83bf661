package clientpool_test

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/clientpool"
)

// conn is a toy client for the runnable example.
type conn struct{ id int }

func Example() {
	dials := 0
	p, err := clientpool.New(clientpool.Options[string, *conn]{
		Name: "example",
		Dial: clientpool.DialFn[string, *conn](func(context.Context, string) (*conn, error) {
			dials++
			return &conn{id: dials}, nil
		}),
		Close: clientpool.CloseFn[*conn](func(c *conn) error {
			fmt.Println("closed client", c.id)
			return nil
		}),
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	ctx := context.Background()
	call := func(answer error) {
		err := p.Do(ctx, "tenant-a", func(_ context.Context, c *conn) error {
			fmt.Println("call on client", c.id)
			return answer
		})
		fmt.Println(" ->", status.Code(err))
	}
	call(status.Error(codes.NotFound, "no such deployment")) // an answer: kept
	call(status.Error(codes.Unavailable, "connection lost")) // broken: evicted and closed
	call(nil)                                                // a fresh dial
	// Output:
	// call on client 1
	//  -> NotFound
	// call on client 1
	// closed client 1
	//  -> Unavailable
	// call on client 2
	//  -> OK
	// closed client 2
}

// connection identifies a gRPC client: where it dials and which Secret
// holds its API key. The key's value is not part of it.
type connection struct {
	Endpoint  string
	Namespace string
	Secret    string
}

// secretToken is per-call credentials: every RPC reads the Secret through
// a client.Reader (the manager's cache), so a rotated key is used by the
// next call without a redial, and a missing or rejected key fails that call
// as Unauthenticated (Auth), which evicts.
type secretToken struct {
	r   client.Reader
	key client.ObjectKey
}

func (s secretToken) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	var sec corev1.Secret
	if err := s.r.Get(ctx, s.key, &sec); err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "read API key Secret %s: %v", s.key, err)
	}
	tok, ok := sec.Data["api-key"]
	if !ok {
		return nil, status.Errorf(codes.Unauthenticated, "Secret %s has no api-key", s.key)
	}
	return map[string]string{"authorization": "Bearer " + string(tok)}, nil
}

// A real deployment would use TLS; per-call credentials then require it.
func (secretToken) RequireTransportSecurity() bool { return false }

// Credentials are read per call, not captured at dial.
func Example_perCallCredentials() {
	var r client.Reader // the manager's client, in a controller
	p, err := clientpool.New(clientpool.Options[connection, *grpc.ClientConn]{
		Name: "cleanup-api",
		Dial: clientpool.DialFn[connection, *grpc.ClientConn](func(_ context.Context, k connection) (*grpc.ClientConn, error) {
			return grpc.NewClient(k.Endpoint,
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithPerRPCCredentials(secretToken{r: r, key: client.ObjectKey{Namespace: k.Namespace, Name: k.Secret}}))
		}),
		Close:       clientpool.CloseFn[*grpc.ClientConn](func(c *grpc.ClientConn) error { return c.Close() }),
		CallTimeout: 10 * time.Second, // a silent connection becomes a Transport error, and is evicted
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()

	// In the finalizer's cleanup, and everywhere else the client is used:
	key := connection{Endpoint: "dns:///cleanup.example:443", Namespace: "ops", Secret: "cleanup-api-key"}
	err = p.Do(context.TODO(), key, func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	})
	if err != nil && status.Code(err) != codes.NotFound {
		fmt.Println("cleanup failed, will retry:", err)
	}
}
