// Package testenv shares one real control plane and one PostgreSQL server
// among the tests of a package: started on first use, stopped by Main after
// the last test. Tests isolate themselves by namespace (Namespace) and by
// database object names.
//
// It is finale's own thin layer on the public package
// github.com/finale-dev/finale/testenv, which users call: the two servers
// start lazily and separately here, because many of finale's packages need
// only one of them, and PostgreSQL is installed when missing
// (pgserver.Options.Install), as finale's tests install what they need.
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
	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/testenv"
)

var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error

	pgOnce sync.Once
	pg     *pgserver.Server
	pgErr  error
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
		pg, pgErr = pgserver.Start(context.Background(), pgserver.Options{Log: os.Stderr, Install: true})
	})
	if pgErr != nil {
		t.Fatalf("start PostgreSQL: %v", pgErr)
	}
	return pg
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
