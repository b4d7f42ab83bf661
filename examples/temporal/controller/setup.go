package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/watchdog"
)

// Finalizer is the cleanup finalizer of WorkerDeployments.
const Finalizer = "temporal.finale.dev/cleanup"

// ControllerName names the WorkerDeployment controller.
const ControllerName = "temporal-workerdeployment"

// DefaultCallTimeout is Options.CallTimeout when zero: the SDK's own
// default per-call timeout.
const DefaultCallTimeout = 10 * time.Second

// Options configure the operator. The zero value is the guarded build.
type Options struct {
	// Naive builds the baseline: temporal-worker-controller v1.7's pool
	// (see the package documentation). Only for comparisons.
	Naive bool
	// Clock is injected everywhere time decides; nil is the real clock.
	Clock clock.Clock
	// CallTimeout bounds each call; zero is DefaultCallTimeout.
	CallTimeout time.Duration
	// RetryInterval is how soon an object that needs the user is looked
	// at again; zero is lifecycle.DefaultRetryInterval.
	RetryInterval time.Duration
	// BlockedAfter is the watchdog's threshold; zero is its default.
	BlockedAfter time.Duration
	// Identity is the SDK clients' identity; "" is "finale-temporal".
	Identity string
	// PoolName labels the pool's metrics; "" is "temporal".
	PoolName string
	// Workers is the controller's concurrency; zero is 2.
	Workers int
	// RateLimiter spaces the retries of failed reconciles; nil is
	// lifecycle.DefaultRateLimiter.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
	// SkipNameValidation lets several managers run in one process (tests).
	SkipNameValidation bool
	// ClientOptions, when set, adjusts every SDK client's options before
	// its dial (tests: keepalive, say).
	ClientOptions func(*sdkclient.Options)
}

// Pool is the operator's client pool, whichever build.
type Pool interface {
	lifecycle.Pool[Key, sdkclient.Client]
	// Len is the number of cached clients.
	Len() int
	// Close closes every cached client.
	Close() error
}

// Operator is what Setup wired, for tests, the scenarios and the benchmark.
type Operator struct {
	Pool     Pool
	Watchdog *watchdog.Watchdog
	dialer   *dialer
	calls    *countingPool
}

// Dials counts the SDK client dials since Setup.
func (op *Operator) Dials() int64 { return op.dialer.dials.Load() }

// Calls counts the reconciler's calls through the pool since Setup, and
// how many of them failed.
func (op *Operator) Calls() (calls, failed int64) {
	return op.calls.calls.Load(), op.calls.failed.Load()
}

// countingPool counts the calls the reconciler makes through the pool.
type countingPool struct {
	lifecycle.Pool[Key, sdkclient.Client]
	calls, failed atomic.Int64
}

func (p *countingPool) Do(ctx context.Context, key Key, fn func(ctx context.Context, c sdkclient.Client) error) error {
	p.calls.Add(1)
	err := p.Pool.Do(ctx, key, fn)
	if err != nil {
		p.failed.Add(1)
	}
	return err
}

// Setup registers the WorkerDeployment controller with mgr.
func Setup(mgr ctrl.Manager, o Options) (*Operator, error) {
	if o.CallTimeout < 0 || o.RetryInterval < 0 || o.BlockedAfter < 0 || o.Workers < 0 {
		return nil, errors.New("temporal controller: CallTimeout, RetryInterval, BlockedAfter and Workers must not be negative (0 is the default)")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	o.CallTimeout = cmp.Or(o.CallTimeout, DefaultCallTimeout)
	o.Identity = cmp.Or(o.Identity, "finale-temporal")
	o.PoolName = cmp.Or(o.PoolName, "temporal")
	o.Workers = cmp.Or(o.Workers, 2)

	d := &dialer{secrets: mgr.GetAPIReader(), identity: o.Identity, logger: discardLogger, opts: o.ClientOptions}
	op := &Operator{dialer: d}
	var a lifecycle.Adapter[*wd, Key, sdkclient.Client] = adapter{r: mgr.GetAPIReader()}
	if o.Naive {
		op.Pool = newNaivePool(d, o.CallTimeout)
		a = naiveAdapter{adapter{r: mgr.GetAPIReader()}}
	} else {
		p, err := clientpool.New(clientpool.Options[Key, sdkclient.Client]{
			Name: o.PoolName, Dial: d, Close: clientpool.CloseFunc[sdkclient.Client](sdkclient.Client.Close),
			Clock: o.Clock, CallTimeout: o.CallTimeout,
		})
		if err != nil {
			return nil, err
		}
		op.Pool = p
	}

	recorder := mgr.GetEventRecorder("finale-temporal")
	op.Watchdog = watchdog.New(watchdog.Options{
		Clock: o.Clock, Threshold: o.BlockedAfter, Recorder: recorder, Scheme: mgr.GetScheme(),
		Conditions: watchdog.StatusConditions{Reader: mgr.GetAPIReader(), Status: mgr.GetClient()},
	})
	if err := mgr.Add(op.Watchdog.Runnable(watchdog.DefaultCheckInterval, mgr.GetAPIReader())); err != nil {
		return nil, err
	}
	op.calls = &countingPool{Pool: op.Pool}
	// No cleanup records and no hold, in both builds: see the package
	// documentation. A Connection or Secret that appears later is seen at
	// the next retry (RetryInterval).
	r, err := lifecycle.New(mgr.GetClient(), func() *wd { return &wd{} }, a, op.calls, lifecycle.Options{
		Finalizer: Finalizer, Scheme: mgr.GetScheme(), Watchdog: op.Watchdog, Skip: lifecycle.SkipLedger | lifecycle.SkipHold,
		Recorder: recorder, APIReader: mgr.GetAPIReader(), Clock: o.Clock, RetryInterval: o.RetryInterval,
	})
	if err != nil {
		return nil, err
	}
	err = r.SetupWithManager(mgr, lifecycle.SetupOptions{
		Name: ControllerName, Workers: o.Workers, RateLimiter: o.RateLimiter, SkipNameValidation: o.SkipNameValidation,
	})
	if err != nil {
		return nil, fmt.Errorf("%s controller: %w", ControllerName, err)
	}
	return op, nil
}
