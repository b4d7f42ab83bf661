package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/pgserver"
)

// StopTimeout bounds how long Stop waits for one function started with Go
// or GoFor to return after its context is cancelled; one that does not is
// reported and left, so that the control plane still stops.
const StopTimeout = 30 * time.Second

// Options configure Start. The zero value starts a control plane alone.
type Options struct {
	// CRDs are installed once the control plane is up; Start waits until
	// each is established and served.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// CRDPaths are YAML or JSON files, or directories of them (not
	// recursive: *.yaml, *.yml, *.json), holding apiextensions.k8s.io/v1
	// CustomResourceDefinitions: controller-gen's config/crd/bases, say. A
	// path that does not exist, or a document of another kind, is an
	// error.
	CRDPaths []string
	// Scheme is the Client's; nil means Scheme().
	Scheme *runtime.Scheme
	// Postgres, when set, starts a throwaway PostgreSQL server too, with
	// these options. PostgreSQL must be installed (pgserver says how)
	// unless Postgres.Install is set.
	Postgres *pgserver.Options
	// ControlPlane tunes the control plane; its Log defaults to Log.
	ControlPlane controlplane.Options
	// Log receives progress: the first Start on a machine builds the
	// Kubernetes binaries, which takes minutes. nil means os.Stderr;
	// io.Discard silences it.
	Log io.Writer
}

// Env is a running test environment.
type Env struct {
	// ControlPlane is the running control plane.
	ControlPlane *controlplane.ControlPlane
	// Config authenticates as the control plane's admin (system:masters).
	Config *rest.Config
	// Client is an uncached client on Config with Scheme.
	Client client.Client
	// Scheme is the Client's.
	Scheme *runtime.Scheme
	// Postgres is the PostgreSQL server; nil unless Options.Postgres.
	Postgres *pgserver.Server

	log io.Writer

	mu      sync.Mutex // guards runs, hooks and stopped
	runs    []*running
	hooks   []func()
	stopped bool

	stopOnce sync.Once
	stopErr  error // Stop's result; guarded by stopOnce
}

type running struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

// Scheme returns a scheme with client-go's built-in types and
// apiextensions.k8s.io/v1 (CustomResourceDefinition); add your own types to
// it.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}

// Start starts the control plane (and PostgreSQL when asked), installs the
// CRDs and returns the environment. On failure it stops what it started.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	crds, err := readCRDs(opts.CRDPaths)
	if err != nil {
		return nil, err
	}
	crds = append(append([]*apiextensionsv1.CustomResourceDefinition{}, opts.CRDs...), crds...)
	e := &Env{Scheme: opts.Scheme, log: opts.Log}
	if e.Scheme == nil {
		e.Scheme = Scheme()
	}
	if e.log == nil {
		e.log = os.Stderr
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Stop())
		}
	}()

	// PostgreSQL starts while the control plane does: about a second saved,
	// and a missing installation is reported as soon as it is found.
	pgDone := make(chan error, 1)
	if opts.Postgres != nil {
		po := *opts.Postgres
		if po.Log == nil {
			po.Log = e.log
		}
		go func() {
			var err error
			e.Postgres, err = pgserver.Start(ctx, po)
			pgDone <- err
		}()
	} else {
		pgDone <- nil
	}
	co := opts.ControlPlane
	if co.Log == nil {
		co.Log = e.log
	}
	cp, cpErr := controlplane.Start(ctx, co)
	e.ControlPlane = cp // nil when it failed: Start stopped it then
	if pgErr := <-pgDone; pgErr != nil || cpErr != nil {
		return nil, fmt.Errorf("testenv: %w", errors.Join(cpErr, pgErr))
	}
	e.Config = cp.Config
	if e.Client, err = client.New(cp.Config, client.Options{Scheme: e.Scheme}); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	if err := installCRDs(ctx, e.Client, cp.Config, crds); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	return e, nil
}

// Go runs fn (a manager's Start, say) until Stop, which cancels its context
// and waits for it to return before anything else stops: a manager that
// outlives the control plane floods the log with connection errors and may
// act on a half-stopped cluster. An fn that returns early with an error
// has it logged at once and returned by Stop.
func (e *Env) Go(name string, fn func(ctx context.Context) error) {
	r := e.start(name, fn)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		r.cancel()
		return
	}
	e.runs = append(e.runs, r)
}

// GoFor runs fn (a manager's Start, say) for one test: its context is
// cancelled and fn awaited when the test ends, before the environment can
// stop; an error other than the cancellation fails the test.
func (e *Env) GoFor(t testing.TB, fn func(ctx context.Context) error) {
	t.Helper()
	r := e.start(t.Name(), fn)
	t.Cleanup(func() {
		r.cancel()
		if err := r.wait(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
}

// OnStop registers fn to run when Stop begins, after the functions started
// with Go have returned and before the control plane stops, in reverse order
// of registration (like defer): close clients and pools there.
func (e *Env) OnStop(fn func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hooks = append(e.hooks, fn)
}

// Stop stops everything in the order that keeps each part's dependencies up
// while it stops: the functions started with Go (cancelled, then awaited),
// the OnStop functions, the control plane, PostgreSQL. It returns what went
// wrong on the way, and is safe to call more than once.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() {
		e.mu.Lock()
		e.stopped = true
		runs, hooks := e.runs, e.hooks
		e.mu.Unlock()
		var errs []error
		for _, r := range runs {
			r.cancel()
		}
		for _, r := range runs {
			if err := r.wait(); err != nil {
				errs = append(errs, err)
			}
		}
		for i := len(hooks) - 1; i >= 0; i-- {
			hooks[i]()
		}
		if e.ControlPlane != nil {
			errs = append(errs, e.ControlPlane.Stop())
		}
		if e.Postgres != nil {
			errs = append(errs, e.Postgres.Stop())
		}
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}

func (e *Env) start(name string, fn func(ctx context.Context) error) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = fn(ctx)
		if r.err != nil && ctx.Err() == nil {
			fmt.Fprintf(e.log, "testenv: %s stopped early: %v\n", name, r.err)
		}
	}()
	return r
}

// wait waits for r after its cancellation; a cancellation error is no
// error.
func (r *running) wait() error {
	select {
	case <-r.done:
	case <-time.After(StopTimeout):
		return fmt.Errorf("%s did not return within %s of its context's cancellation", r.name, StopTimeout)
	}
	if r.err != nil && !errors.Is(r.err, context.Canceled) {
		return fmt.Errorf("%s: %w", r.name, r.err)
	}
	return nil
}

// Main is a TestMain: it starts the environment, calls setup with it (keep
// it in a package variable, start managers with Go), runs the tests, stops
// everything in order and exits. A failure to start fails the run; it
// never skips the tests.
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) {
//		testenv.Main(m, testenv.Options{CRDPaths: []string{"../config/crd/bases"}},
//			func(e *testenv.Env) error { env = e; return nil })
//	}
func Main(m *testing.M, opts Options, setup func(*Env) error) {
	os.Exit(run(m, opts, setup))
}

func run(m *testing.M, opts Options, setup func(*Env) error) int {
	e, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if setup != nil {
		if err := setup(e); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: setup: %v\n", err)
			if err := e.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			return 1
		}
	}
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Namespace creates a namespace named after the test (plus a random
// suffix) and returns its name. It is not deleted afterwards: many tests
// delete it themselves, and the control plane is thrown away anyway.
func Namespace(t testing.TB, c client.Client) string {
	t.Helper()
	base := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	if len(base) > 40 {
		base = base[:40]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(base, "-") + "-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}
