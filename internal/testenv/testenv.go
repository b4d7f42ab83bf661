// Package testenv shares one real control plane, one PostgreSQL server and,
// for the G1 seed's own stack, one Temporal server among the tests of a
// package: each started on first use, stopped by Main after the last test.
// Tests isolate themselves by namespace (Namespace), by database object
// names and by worker deployment names.
//
// It is finale's own thin layer on the public package
// github.com/finale-dev/finale/testenv, which users call: the servers
// start lazily and separately here, because many of finale's packages need
// only one of them, PostgreSQL is installed when missing
// (pgserver.Options.Install), as finale's tests install what they need, and
// the Temporal server is built when missing (internal/temporalbin).
//
// A package that uses it calls Main from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/temporalbin"
	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/testenv"
)

var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error

	pgOnce sync.Once
	pg     *pgserver.Server
	pgCA   []byte // PEM of the CA that issued pg's certificate
	pgErr  error

	tsOnce sync.Once
	ts     *temporalbin.Server
	tsErr  error
)

// Main runs the package's tests, then stops whatever they started: the
// control plane first, PostgreSQL last (testenv's order).
func Main(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	if pg != nil {
		if err := pg.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	if ts != nil {
		if err := ts.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(code)
}

// ControlPlane returns the package's control plane, starting it on first use.
// It fails the test when the control plane cannot start; it never skips.
func ControlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	envOnce.Do(func() {
		env, envErr = testenv.Start(context.Background(), testenv.Options{Log: os.Stderr})
	})
	if envErr != nil {
		t.Fatalf("start control plane: %v", envErr)
	}
	return env.ControlPlane
}

// Postgres returns the package's PostgreSQL server, starting it on first use
// (and installing PostgreSQL when it is missing and the tests run as root).
func Postgres(t testing.TB) *pgserver.Server {
	t.Helper()
	pgOnce.Do(func() {
		// It serves TLS (clients may still connect without), with a
		// certificate for the loopback names from a CA of the run's own, so
		// that a Server at its defaults (verify-full, the CA in the
		// credential Secret) works against it: PostgresCA.
		ca, err := pgserver.NewCA()
		if err != nil {
			pgErr = err
			return
		}
		cert, err := ca.Issue("127.0.0.1", "localhost")
		if err != nil {
			pgErr = err
			return
		}
		pgCA = ca.CertPEM
		pg, pgErr = pgserver.Start(context.Background(), pgserver.Options{Log: os.Stderr, Install: true, TLS: &cert})
	})
	if pgErr != nil {
		t.Fatalf("start PostgreSQL: %v", pgErr)
	}
	return pg
}

// PostgresCA is the PEM certificate of the CA that issued Postgres's
// server certificate (for 127.0.0.1 and localhost), starting it on first
// use: what a credential Secret holds under ca.crt.
func PostgresCA(t testing.TB) []byte {
	t.Helper()
	Postgres(t)
	return pgCA
}

// Temporal returns the package's Temporal server, starting it on first use
// (and building it first, about nine minutes cold, when internal/temporalbin's
// cache lacks it).
func Temporal(t testing.TB) *temporalbin.Server {
	t.Helper()
	tsOnce.Do(func() {
		ts, tsErr = temporalbin.Start(context.Background(), temporalbin.Options{Log: os.Stderr})
	})
	if tsErr != nil {
		t.Fatalf("start Temporal: %v", tsErr)
	}
	return ts
}

// Scheme has the built-in types and CRDs.
func Scheme() *runtime.Scheme { return testenv.Scheme() }

// Client is an uncached admin client on the package's control plane.
func Client(t testing.TB, scheme *runtime.Scheme) client.Client {
	t.Helper()
	c, err := client.New(ControlPlane(t).Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Namespace creates a namespace named after the test (plus a random suffix)
// and returns its name; see testenv.Namespace.
func Namespace(t testing.TB, c client.Client) string {
	t.Helper()
	return testenv.Namespace(t, c)
}
