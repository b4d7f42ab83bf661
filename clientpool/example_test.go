package clientpool_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
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

// deleteDeployment is an existing controller's helper: it takes the client
// as the controller has always passed it down, and keeps its signature.
func deleteDeployment(_ context.Context, c *conn, name string) error {
	fmt.Printf("delete %s on client %d\n", name, c.id)
	if c.id == 1 {
		return status.Error(codes.Unavailable, "connection lost") // a poisoned client
	}
	return nil
}

// An existing controller adopts the pool only where it used to take a
// client from its own cache: it takes a lease, passes the client down as
// before, and one deferred Release applies the pool's policy to the
// outcome. With CallTimeout, the lease's context ends at the bound, and a
// guard closes the client if the helper is still stuck in it a grace
// later.
func Example_lease() {
	dials := 0
	p, err := clientpool.New(clientpool.Options[string, *conn]{
		Name: "example-lease",
		Dial: clientpool.DialFn[string, *conn](func(context.Context, string) (*conn, error) {
			dials++
			return &conn{id: dials}, nil
		}),
		Close:       clientpool.CloseFunc[*conn](func(c *conn) { fmt.Println("closed client", c.id) }),
		CallTimeout: 10 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()

	// The controller's cleanup step: err is its named result, which
	// Release reads (and may replace).
	cleanup := func(ctx context.Context, tenant, name string) (err error) {
		lease, err := p.Acquire(ctx, tenant)
		if err != nil {
			return err
		}
		defer lease.Release(&err)
		return deleteDeployment(lease.Context(), lease.Client(), name)
	}
	ctx := context.Background()
	fmt.Println(" ->", status.Code(cleanup(ctx, "tenant-a", "worker-1"))) // broken: evicted and closed
	fmt.Println(" ->", status.Code(cleanup(ctx, "tenant-a", "worker-1"))) // a fresh dial
	// Output:
	// delete worker-1 on client 1
	// closed client 1
	//  -> Unavailable
	// delete worker-1 on client 2
	//  -> OK
	// closed client 2
}

// certificate stands for the client certificate an mTLS dial uses.
type certificate struct {
	serial   int
	notAfter time.Time
}

// The caller's own dial gets its arguments (here the certificate the
// caller has just read from its Secret) without a context value, and says
// when the client expires: the pool retires it at the certificate's
// NotAfter, on its clock, and the next call dials with the renewed one.
func ExamplePool_DoWith() {
	clk := clocktesting.NewFakePassiveClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	p, err := clientpool.New(clientpool.Options[string, *conn]{
		Name:  "example-mtls",
		Clock: clk,
		Dial: clientpool.DialFn[string, *conn](func(context.Context, string) (*conn, error) {
			return nil, errors.New("this pool's calls bring their certificate")
		}),
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	dialWith := func(cert certificate) clientpool.DialedFn[string, *conn] {
		return func(_ context.Context, tenant string) (clientpool.Dialed[*conn], error) {
			fmt.Println("dial", tenant, "with certificate", cert.serial)
			return clientpool.Dialed[*conn]{Client: &conn{id: cert.serial}, NotAfter: cert.notAfter}, nil
		}
	}
	call := func(cert certificate) {
		err := p.DoWith(context.Background(), "tenant-a", dialWith(cert), func(_ context.Context, c *conn) error {
			fmt.Println("call on client", c.id)
			return nil
		})
		if err != nil {
			fmt.Println(err)
		}
	}
	first := certificate{serial: 1, notAfter: clk.Now().Add(24 * time.Hour)}
	call(first)
	call(first) // cached: no dial
	clk.SetTime(first.notAfter)
	call(certificate{serial: 2, notAfter: first.notAfter.Add(24 * time.Hour)})
	// Output:
	// dial tenant-a with certificate 1
	// call on client 1
	// call on client 1
	// dial tenant-a with certificate 2
	// call on client 2
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

// A holder whose client's Close waits for the call in flight (a connection
// serialised by a mutex) runs its calls through Lease.Do: the holder then
// returns at the lease's bound whatever the client does, as Do's caller
// does. The helper keeps its signature.
func ExampleLease_Do() {
	p, err := clientpool.New(clientpool.Options[string, *conn]{
		Name: "example-lease-do",
		Dial: clientpool.DialFn[string, *conn](func(context.Context, string) (*conn, error) {
			return &conn{id: 2}, nil
		}),
		Close:       clientpool.CloseFunc[*conn](func(c *conn) { fmt.Println("closed client", c.id) }),
		CallTimeout: 10 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	cleanup := func(ctx context.Context, tenant, name string) (err error) {
		lease, err := p.Acquire(ctx, tenant)
		if err != nil {
			return err
		}
		defer lease.Release(&err)
		return lease.Do(lease.Context(), func(ctx context.Context, c *conn) error {
			return deleteDeployment(ctx, c, name)
		})
	}
	fmt.Println(" ->", status.Code(cleanup(context.Background(), "tenant-a", "worker-1")))
	// Output:
	// delete worker-1 on client 2
	//  -> OK
	// closed client 2
}
