package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
)

// CampaignOptions configure a randomized campaign.
type CampaignOptions struct {
	// Seed of the first run; run i uses Seed+i, so a failing run replays
	// alone with Seed set to its printed seed and Runs 1.
	Seed int64
	// Runs is how many schedules to run; must be at least 1.
	Runs int
	// Steps per schedule; zero is DefaultSteps.
	Steps int
	// Workers is how many runs go at once, each in its own world (operator,
	// namespace, records namespace, proxy, clock); zero is
	// DefaultCampaignWorkers. Runs stay reproducible whatever it is: a
	// run's schedule depends only on its seed.
	Workers int
	// Naive runs the schedules against the build with the guarantees
	// switched off, to show what the campaign catches.
	Naive bool
	// APIServers adds the apiserver fault kinds to the schedules
	// (stale-apiserver-lag, apiserver-partition, apiserver-failover): each
	// world gets a kube-apiserver of its own on the control plane's etcd,
	// behind an etcd link that lags or partitions, and the operator reads
	// its cache through one front and writes (and reads live) through
	// another, the cache starting on the lagging apiserver. Off, schedules
	// are drawn exactly as before it existed, so earlier seeds replay.
	APIServers bool
}

// DefaultSteps is the schedule length when CampaignOptions.Steps is zero.
const DefaultSteps = 5

// ErrRuns means CampaignOptions.Runs is below 1.
var ErrRuns = errors.New("scenarios: CampaignOptions.Runs must be at least 1 (try --runs 20)")

// Step kinds of a randomized schedule.
const (
	StepCreateRole     = "create-role"
	StepCreateDatabase = "create-database"
	StepDelete         = "delete"
	StepDeleteSecret   = "delete-secret"
	StepDeleteNS       = "delete-namespace"
	StepFreeze         = "proxy-freeze"
	StepReset          = "proxy-reset"
	StepRefuse         = "proxy-refuse"
	StepLatency        = "proxy-latency"
	StepHeal           = "proxy-heal"
	StepRestart        = "operator-restart"
	StepPause          = "pause-workers"
	StepClockJump      = "clock-jump"
	StepStaleEvents    = "stale-events"
	StepAPILag         = FaultAPILag
	StepAPIPartition   = FaultAPIPartition
	StepAPIFailover    = FaultAPIFailover
)

// apiserverKinds are drawn too with CampaignOptions.APIServers.
var apiserverKinds = []string{StepAPILag, StepAPIPartition, StepAPIFailover}

var stepKinds = []string{
	StepCreateRole, StepCreateDatabase, StepDelete, StepDelete, StepDeleteSecret, StepDeleteNS,
	StepFreeze, StepReset, StepRefuse, StepLatency, StepHeal, StepRestart, StepPause, StepClockJump,
	StepStaleEvents,
}

// step is one schedule entry; arg is its parameter (an object index, a
// duration).
type step struct {
	kind string
	arg  int
}

func (s step) String() string {
	switch s.kind {
	case StepDelete:
		return fmt.Sprintf("%s object #%d", s.kind, s.arg)
	case StepClockJump:
		return fmt.Sprintf("%s +%dm", s.kind, s.arg)
	case StepLatency, StepStaleEvents, StepAPILag:
		return fmt.Sprintf("%s %dms", s.kind, s.arg)
	}
	return s.kind
}

// schedule draws a run's steps from its seed: the same seed, the same
// schedule.
func schedule(seed int64, n int) []step { return scheduleOf(seed, n, stepKinds) }

// scheduleOf draws from kinds.
func scheduleOf(seed int64, n int, kinds []string) []step {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x66696e616c65)) // "finale"
	out := make([]step, 0, n)
	for range n {
		s := step{kind: kinds[rng.IntN(len(kinds))]}
		switch s.kind {
		case StepDelete:
			s.arg = rng.IntN(4)
		case StepClockJump:
			// Up to past the hold timeout: a release without delete
			// must leave a record, never a leak.
			s.arg = 1 + rng.IntN(int(holdTimeout/time.Minute)+5)
		case StepLatency:
			s.arg = 50 + rng.IntN(300)
		case StepStaleEvents:
			s.arg = 200 + rng.IntN(1800)
		case StepAPILag:
			s.arg = 100 + rng.IntN(9901) // 0.1 to 10 s
		}
		out = append(out, s)
	}
	return out
}

// Campaign runs opts.Runs randomized schedules against the reference
// operator, each in a fresh namespace with a Server, a Role and a Database:
// creates, deletes, Secret and namespace deletions, proxy faults (freeze,
// reset, refuse, latency), operator restarts, paused workers, delayed watch
// events and clock jumps, then heals every fault, deletes the namespace and checks finished,
// no-leak and no-wrong-delete. A failing run is reported with its seed and
// schedule.
func Campaign(ctx context.Context, opts CampaignOptions, env Env, out io.Writer) (rep CampaignReport, err error) {
	rep = CampaignReport{Result: Result{Name: "campaign", ExpectViolations: opts.Naive}}
	if opts.Naive {
		rep.Name += NaiveSuffix
	}
	if opts.Runs < 1 {
		return rep, ErrRuns
	}
	if opts.Steps <= 0 {
		opts.Steps = DefaultSteps
	}
	t0 := time.Now()
	defer func() { rep.Elapsed = time.Since(t0) }()
	out = serialized(out)
	// Runs go campaignWorkers at a time, each world with its own operator
	// (restricted to the run's namespace), records namespace, proxy and
	// clock, so a fault in one run never reaches another.
	if opts.Workers <= 0 {
		opts.Workers = DefaultCampaignWorkers
	}
	worlds := make([]*world, opts.Workers)
	defer func() {
		for _, w := range worlds {
			if w != nil {
				w.close()
			}
		}
	}()
	kinds := stepKinds
	if opts.APIServers {
		kinds = append(slices.Clone(stepKinds), apiserverKinds...)
	}
	for i := range worlds {
		if worlds[i], err = newWorld(ctx, env, opts.Naive); err != nil {
			return rep, err
		}
		if opts.APIServers {
			if err := worlds[i].addAPIServer(ctx); err != nil {
				return rep, err
			}
		}
	}
	u, err := SeedUntagged(ctx, worlds[0].db, worlds[0].prefix, 2)
	if err != nil {
		return rep, err
	}
	type outcome struct {
		seed  int64
		sched []string
		res   Result
		err   error
	}
	outcomes := make([]outcome, opts.Runs)
	err = onWorlds(ctx, worlds, opts.Runs, func(w *world, i int) {
		o := &outcomes[i]
		o.seed = opts.Seed + int64(i)
		steps := scheduleOf(o.seed, opts.Steps, kinds)
		for _, s := range steps {
			o.sched = append(o.sched, s.String())
		}
		if err := w.campaignRun(ctx, steps, &o.res); err != nil {
			if ctx.Err() != nil {
				o.err = ctx.Err()
				return
			}
			o.res.add(Violation{Finished, err.Error()})
		}
		if o.err = w.checkEnd(ctx, &o.res, Untagged{}); o.err != nil {
			return
		}
		say(out, "run %3d seed %-6d violations %d  %v", i, o.seed, len(o.res.Violations), o.sched)
	})
	if err != nil {
		return rep, err
	}
	for i, o := range outcomes {
		if o.err != nil {
			return rep, fmt.Errorf("run %d (seed %d): %w", i, o.seed, o.err)
		}
		rep.Runs++
		for k, n := range o.res.Faults {
			for range n {
				rep.fault(k)
			}
		}
		rep.add(o.res.Violations...)
		for _, n := range o.res.Notes {
			rep.note("run %d seed %d: %s", i, o.seed, n)
		}
		if len(o.res.Violations) > 0 {
			rep.Failed = append(rep.Failed, RunRecord{Run: i, Seed: o.seed, Schedule: o.sched, Violations: o.res.Violations})
		}
	}
	vs, err := CheckNoWrongDelete(ctx, worlds[0].db, u)
	if err != nil {
		return rep, err
	}
	rep.add(vs...)
	return rep, u.Drop(ctx, worlds[0].db)
}

// DefaultCampaignWorkers is how many randomized runs go at once when
// CampaignOptions.Workers is zero: two keep a 2-core machine busy without
// pushing a healthy deletion past the finished bound.
const DefaultCampaignWorkers = 2

// campaignRun runs one schedule and its end: heal, delete the namespace,
// check finished.
func (w *world) campaignRun(ctx context.Context, steps []step, r *Result) error {
	ns, err := w.namespace(ctx, "campaign-")
	if err != nil {
		return err
	}
	w.stop()
	// Every run starts on a healed world, whichever way the one before it
	// ended: a partition left on by a run that returned early would break
	// every later run of this world.
	w.heal()
	w.only = []string{ns}
	if err := w.routeDefault(); err != nil {
		return err
	}
	if err := w.start(ctx, nil); err != nil {
		return err
	}
	defer w.stop()
	if err := w.server(ctx, ns); err != nil {
		return err
	}
	objs := []client.Object{w.role(ns, "r0"), w.database(ns, "d0")}
	for _, o := range objs {
		if err := w.create(ctx, o); err != nil {
			return err
		}
	}
	if err := w.waitReady(ctx, readyTimeout, objs...); err != nil {
		return err
	}
	nsGone := false
	for i, s := range steps {
		switch s.kind {
		case StepCreateRole, StepCreateDatabase:
			if nsGone {
				continue
			}
			var o client.Object = w.role(ns, fmt.Sprintf("r%d", i+1))
			if s.kind == StepCreateDatabase {
				o = w.database(ns, fmt.Sprintf("d%d", i+1))
			}
			if err := w.create(ctx, o); err != nil {
				return err
			}
			objs = append(objs, o)
		case StepDelete:
			o := objs[s.arg%len(objs)]
			if err := client.IgnoreNotFound(w.c.Delete(ctx, o)); err != nil {
				return err
			}
		case StepDeleteSecret:
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName}}
			if err := client.IgnoreNotFound(w.c.Delete(ctx, sec)); err != nil {
				return err
			}
			r.fault(FaultSecretDelete)
		case StepDeleteNS:
			if err := w.deleteNamespace(ctx, ns); err != nil {
				return err
			}
			nsGone = true
			r.fault(FaultNSDelete)
		case StepFreeze:
			w.proxy.Freeze()
			r.fault(FaultProxyFreeze)
		case StepReset:
			w.proxy.ResetAll()
			r.fault(FaultProxyReset)
		case StepRefuse:
			w.proxy.Refuse(true)
			r.fault(FaultProxyRefuse)
		case StepLatency:
			w.proxy.SetLatency(time.Duration(s.arg) * time.Millisecond)
			r.fault(FaultProxyLatency)
		case StepHeal:
			w.heal()
		case StepRestart:
			w.stop()
			r.fault(FaultRestart)
			if err := w.start(ctx, nil); err != nil {
				// The real operator exits with this error and the kubelet
				// restarts it; here it stays down until the heal after the
				// schedule, whose start must succeed. Down is not a
				// violation: the invariants are checked once faults heal.
				r.fault(FaultStartFailed)
				r.note("%s: the operator did not start under the faults, down until they heal: %v", StepRestart, err)
			}
		case StepPause:
			// The Role controller's workers stop while the Database and
			// Server controllers, the hold and the sweeper go on; the next
			// restart or the end of the schedule resumes.
			if w.pauseRole() {
				r.fault(FaultPausedWorkers)
			}
		case StepClockJump:
			w.clock.Step(time.Duration(s.arg) * time.Minute)
			r.fault(FaultClockJump)
		case StepStaleEvents:
			// The Role controller sees its Roles' changes late (the
			// Database and Server controllers on time) until the next
			// heal or restart: it acts on a stale view meanwhile.
			if w.delayRoleEvents(time.Duration(s.arg) * time.Millisecond) {
				r.fault(FaultStaleEvents)
			}
		case StepAPILag:
			// The second apiserver sees etcd late: whatever the
			// operator's cache reads through it is that far behind.
			if w.apiB != nil {
				w.apiB.EtcdLink.SetLag(time.Duration(s.arg) * time.Millisecond)
				r.fault(FaultAPILag)
			}
		case StepAPIPartition:
			if w.apiB != nil {
				w.apiB.EtcdLink.Partition(true)
				r.fault(FaultAPIPartition)
			}
		case StepAPIFailover:
			// The fronts swap apiservers: the cache moves to the other
			// one (from the lagging one to the fresh one, or back: time
			// travel), and so do the writes.
			if err := w.failover(); err != nil {
				return err
			}
			if w.apiB != nil {
				r.fault(FaultAPIFailover)
			}
		}
		w.settle(ctx, objs)
	}
	w.heal()
	if err := w.startHealed(ctx, r); err != nil {
		return err
	}
	if err := w.deleteNamespace(ctx, ns); err != nil {
		return err
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	vs, err := CheckFinished(ctx, w.c, w.env.bound(), nsObj)
	if err != nil {
		return err
	}
	if len(vs) > 0 {
		left := w.leftovers(ctx, ns)
		for i := range vs {
			vs[i].Detail += "; left: " + left
		}
	}
	r.add(vs...)
	if len(vs) > 0 {
		return w.release(ctx, ns)
	}
	return nil
}

// healedStarts is how many times the start after the heal is tried: the
// first may still meet a connection the faults broke (a write on a pooled
// connection a failover reset: broken pipe), as a restarted pod's first
// try may; the kubelet would start it again.
const healedStarts = 3

// startHealed starts the operator once the faults healed, trying again
// after a failed start as the kubelet would; each failure is counted.
func (w *world) startHealed(ctx context.Context, r *Result) error {
	var err error
	for range healedStarts {
		if err = w.start(ctx, nil); err == nil {
			return nil
		}
		r.fault(FaultStartFailed)
		r.note("the operator did not start after the heal, started again: %v", err)
	}
	return err
}

// heal undoes every proxy fault. The operator is restarted by the caller.
func (w *world) heal() {
	w.resumeRole()
	w.delayRoleEvents(0)
	w.proxy.Thaw()
	w.proxy.Refuse(false)
	w.proxy.SetLatency(0)
	if w.apiB != nil {
		w.apiB.EtcdLink.SetLag(0)
		w.apiB.EtcdLink.Partition(false)
	}
}

// settle gives the operator a moment to act on the last step: it waits,
// briefly and without failing, until every object is Ready or gone, so
// faults land on an operator that is working rather than idle.
func (w *world) settle(ctx context.Context, objs []client.Object) {
	_ = controlplane.WaitFor(ctx, 2*time.Second, "objects settled", func(ctx context.Context) (bool, error) {
		for _, o := range objs {
			err := w.c.Get(ctx, client.ObjectKeyFromObject(o), o)
			if client.IgnoreNotFound(err) != nil {
				return false, err
			}
			if err == nil && !ready(o) {
				return false, nil
			}
		}
		return true, nil
	})
}

// onWorlds runs run(w, i) for every i below n, each world taking the next
// index as soon as it is free, one at a time per world (a world hosts one
// operator). It returns when all are done, with ctx's error if ctx ended
// first; indexes not yet handed out then never run.
func onWorlds(ctx context.Context, worlds []*world, n int, run func(w *world, i int)) error {
	next := make(chan int)
	var wg sync.WaitGroup
	for _, w := range worlds {
		wg.Go(func() {
			for i := range next {
				run(w, i)
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return ctx.Err()
}
