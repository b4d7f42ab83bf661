// Package testenv shares one real control plane, one PostgreSQL server and
// one Temporal server among the tests of a package: each started on first
// use, stopped by Main after the last test. Tests isolate themselves by namespace (Namespace) and by
// database object names.
//
// A package that uses it calls Main from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/temporalbin"
	"github.com/finale-dev/finale/pgserver"
)

var (
	cpOnce sync.Once
	cp     *controlplane.ControlPlane
	cpErr  error

	pgOnce sync.Once
	pg     *pgserver.Server
	pgErr  error

	tsOnce sync.Once
	ts     *temporalbin.Server
	tsErr  error
)

// Main runs the package's tests, then stops whatever they started.
func Main(m *testing.M) {
	code := m.Run()
	if cp != nil {
		if err := cp.Stop(); err != nil {
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
	cpOnce.Do(func() {
		cp, cpErr = controlplane.Start(context.Background(), controlplane.Options{Log: os.Stderr})
	})
	if cpErr != nil {
		t.Fatalf("start control plane: %v", cpErr)
	}
	return cp
}

// Postgres returns the package's PostgreSQL server, starting it on first use.
func Postgres(t testing.TB) *pgserver.Server {
	t.Helper()
	pgOnce.Do(func() {
		pg, pgErr = pgserver.Start(context.Background(), pgserver.Options{Log: os.Stderr})
	})
	if pgErr != nil {
		t.Fatalf("start PostgreSQL: %v", pgErr)
	}
	return pg
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
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}

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
// and returns its name. It is not deleted afterwards: many tests delete it
// themselves, and the control plane is thrown away anyway.
func Namespace(t testing.TB, c client.Client) string {
	t.Helper()
	base := strings.ToLower(t.Name())
	base = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, base)
	if len(base) > 40 {
		base = base[:40]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(base, "-") + "-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}
