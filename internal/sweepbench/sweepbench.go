package sweepbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/procstat"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

// The sweeper's targets at 100,000 records: a pass in under a minute, the
// process in under 256 MiB.
const (
	TargetPass   = time.Minute
	TargetRSSMiB = 256
)

// Result is one measured pass and its baseline.
type Result struct {
	Records int
	// Setup is the owners' and records' creation; Cold the first pass,
	// which also fills the owners' informer (not the figure).
	Setup, Cold time.Duration
	// Pass is the measured pass; List the bare paginated LIST of the same
	// record ConfigMaps, same page size.
	Pass, List time.Duration
	// PassHeap and ListHeap are each one's peak heap above the idle
	// process (which holds the owners' cache), sampled every 5 ms.
	PassHeap, ListHeap uint64
	// PassAlloc and ListAlloc are the bytes each allocated.
	PassAlloc, ListAlloc uint64
	// PeakRSS is the process's VmHWM over the pass, the owners' cache
	// included, its peak reset after the setup; zero where the kernel does
	// not let it be reset (then the setup's peak would be reported).
	PeakRSS int64
}

// MetRSS reports whether the peak RSS is within TargetRSSMiB; false when
// it could not be measured.
func (r Result) MetRSS() bool { return r.PeakRSS > 0 && r.PeakRSS <= TargetRSSMiB<<20 }

// owners is the owners' kind: a CRD of its own, so that owners and the
// record ConfigMaps are different kinds in the cache, as in an operator.
var owners = schema.GroupVersionKind{Group: "sweepbench.finale.dev", Version: "v1", Kind: "Widget"}

// creators is how many owners and records are created at once.
const creators = 32

// Run creates n owners in a namespace of their own and a cleanup record
// for each through a ledger with the real ConfigMap store, runs the cold
// pass, then measures one pass and the bare LIST. c must be a client of
// cfg's API server; log, when set, hears of progress (the setup of 100,000
// takes minutes). The owners' and records' namespaces are left for the
// caller's stack to drop.
func Run(ctx context.Context, cfg *rest.Config, c client.Client, n int, log io.Writer) (Result, error) {
	if log == nil {
		log = io.Discard
	}
	r := Result{Records: n}
	if err := controlplane.InstallCRDs(ctx, c, testenv.OpenCRD(owners, "widgets", false)); err != nil {
		return r, err
	}
	users, err := namespace(ctx, c, "sweepbench-owners-")
	if err != nil {
		return r, err
	}
	recNS, err := namespace(ctx, c, "sweepbench-records-")
	if err != nil {
		return r, err
	}
	store, err := ledger.NewConfigMapStore(c, recNS)
	if err != nil {
		return r, err
	}
	// Every record is written an hour before the sweeper's now: past any
	// settle window, so that the pass looks each owner up.
	t0 := time.Now()
	l, err := ledger.New(store, ledger.Options{Key: ledger.GenerateKey(), Clock: clocktesting.NewFakeClock(t0.Add(-time.Hour)), Remember: -1})
	if err != nil {
		return r, err
	}
	fmt.Fprintf(log, "-- sweep: creating %d owners and their records, %d at a time\n", n, creators)
	start := time.Now()
	svc := &service{deployment: "sweepbench"}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(creators)
	for i := range n {
		g.Go(func() error {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(owners)
			u.SetNamespace(users)
			u.SetName(fmt.Sprintf("w-%06d", i))
			if err := c.Create(gctx, u); err != nil {
				return err
			}
			o := ledger.Owner{APIVersion: owners.GroupVersion().String(), Kind: owners.Kind, Namespace: users, Name: u.GetName(), UID: u.GetUID()}
			id := "role-" + string(o.UID)
			_, err := l.Create(gctx, ledger.Plan{Owner: o, Declared: []string{id}}, svc, func(context.Context, string) ([]string, error) {
				return []string{id}, nil
			})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return r, fmt.Errorf("sweep bench: setup: %w", err)
	}
	r.Setup = time.Since(start)
	fmt.Fprintf(log, "-- sweep: %d owners and records in %s\n", n, r.Setup.Round(time.Second))

	cached, err := cache.New(cfg, cache.Options{Scheme: c.Scheme()})
	if err != nil {
		return r, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = cached.Start(cctx) }()
	var calls atomic.Int64
	s, err := sweep.New(sweep.Options{
		Ledger: l, Owners: cached, Live: c, Clock: clocktesting.NewFakeClock(t0),
		Targets: sweep.TargetsFn(func(context.Context, *ledger.Record) ([]sweep.Candidate, error) {
			calls.Add(1)
			return nil, nil
		}),
	})
	if err != nil {
		return r, err
	}
	start = time.Now()
	if err := pass(ctx, s, n); err != nil {
		return r, fmt.Errorf("sweep bench: cold pass: %w", err)
	}
	r.Cold = time.Since(start)

	// The setup's garbage goes back to the OS and the peak is reset, so
	// that PeakRSS is the pass's own high-water mark.
	debug.FreeOSMemory()
	reset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	r.Pass, r.PassHeap, r.PassAlloc, err = measure(func() error { return pass(ctx, s, n) })
	if err != nil {
		return r, fmt.Errorf("sweep bench: pass: %w", err)
	}
	if n := calls.Load(); n != 0 {
		return r, fmt.Errorf("sweep bench: the sweeper asked for targets %d times although every owner exists", n)
	}
	if reset == nil {
		if r.PeakRSS, err = procstat.PeakRSS(os.Getpid()); err != nil {
			return r, err
		}
	}

	runtime.GC()
	var seen int
	r.List, r.ListHeap, r.ListAlloc, err = measure(func() (err error) {
		seen, err = listAll(ctx, c, recNS, sweep.DefaultPageSize)
		return err
	})
	if err != nil {
		return r, fmt.Errorf("sweep bench: bare LIST: %w", err)
	}
	if seen < n {
		return r, fmt.Errorf("sweep bench: the bare LIST saw %d record ConfigMaps, want at least %d", seen, n)
	}
	return r, nil
}

// measure runs f and returns its time, its peak heap above the heap in
// use when it started, and the bytes it allocated.
func measure(f func() error) (d time.Duration, heap, alloc uint64, err error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	base, peak := heapInUse(), sampleHeap()
	start := time.Now()
	err = f()
	d = time.Since(start)
	heap = sub(peak(), base)
	runtime.ReadMemStats(&after)
	return d, heap, after.TotalAlloc - before.TotalAlloc, err
}

// pass runs one pass and checks that it found every record waiting on a
// live owner.
func pass(ctx context.Context, s *sweep.Sweeper, n int) error {
	rep, err := s.Pass(ctx)
	if err != nil {
		return err
	}
	if rep.Waiting != n || rep.Errors != 0 {
		return fmt.Errorf("%+v, want %d waiting and no error", rep, n)
	}
	return nil
}

func namespace(ctx context.Context, c client.Client, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(ctx, ns); err != nil {
		return "", err
	}
	return ns.Name, nil
}

// listAll reads every ConfigMap of ns in pages of limit, dropping each page
// once decoded, and says how many it saw.
func listAll(ctx context.Context, c client.Reader, ns string, limit int64) (int, error) {
	n, cont := 0, ""
	for {
		var l corev1.ConfigMapList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.Limit(limit), client.Continue(cont)); err != nil {
			return n, err
		}
		n += len(l.Items)
		if cont = l.Continue; cont == "" {
			return n, nil
		}
	}
}

// heapInUse is the bytes of live and not yet swept heap objects, read
// without stopping the world.
func heapInUse() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// sampleHeap samples heapInUse every 5 ms until the returned function is
// called, which returns the highest sample.
func sampleHeap() func() uint64 {
	done, peak := make(chan struct{}), make(chan uint64)
	go func() {
		var highest uint64
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			highest = max(highest, heapInUse())
			select {
			case <-t.C:
			case <-done:
				peak <- highest
				return
			}
		}
	}()
	return func() uint64 { close(done); return <-peak }
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// service answers the ledger's proofs for the records' one deployment, as
// a service that enrolled the ledger's key would.
type service struct {
	deployment string
	once       sync.Once
	salt, tok  string
}

func (m *service) Prove(_ context.Context, q ledger.Question) (ledger.Answer, error) {
	m.once.Do(func() { m.salt, m.tok = q.Enroll.Salt, q.Enroll.Token })
	return ledger.Answer{Deployment: m.deployment, Salt: m.salt, Response: ledger.Respond(m.tok, q, m.deployment, m.salt, nil)}, nil
}
