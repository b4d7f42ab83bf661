package scenarios

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/ledger"
)

// The failover scenario and its naive counterpart (replicas without the
// fence, and without the other guarantees: --naive).
const (
	Failover      = "failover"
	FailoverNaive = Failover + NaiveSuffix
)

// Fault kinds of the failover scenario.
const (
	// FaultLeaderKill: the leader is SIGKILLed at a random point (right
	// after its k-th CREATE or DROP, k random, or after its first
	// statement) of a burst of creates, a namespace deletion or a sweep.
	FaultLeaderKill = "leader-kill"
	// FaultLeaderPause: the leader is SIGSTOPped at a random point of a
	// burst of creates, left stopped until the standby leads and has
	// acted, then SIGCONTed.
	FaultLeaderPause = "leader-pause"
	// FaultLeaderPartition: the leader's connections to the API server
	// are reset and refused at a random point of a burst of creates, so
	// that it cannot renew; PostgreSQL stays reachable.
	FaultLeaderPartition = "leader-partition"
)

// Invariants the failover scenario adds.
const (
	// NoDuplicate: no owner object has two roles or databases in
	// PostgreSQL (nothing was created twice).
	NoDuplicate Invariant = "no-duplicate"
	// NoLostRecord: every live Role and Database has its cleanup record.
	NoLostRecord Invariant = "no-lost-record"
	// NoZombieCall: no replica opened a session, or sent a statement or
	// a Parse or Bind, to PostgreSQL after its lease passed to another (the
	// other's acquisition time, as the Lease recorded it).
	NoZombieCall Invariant = "no-zombie-call"
)

// Failover case kinds: where in the operator's work the leader is hit.
const (
	CaseBurst     = "kill-during-creates"
	CaseNamespace = "kill-during-namespace-deletion"
	CaseSweep     = "kill-during-sweep"
	CasePause     = "pause-then-wake"
	CasePartition = "cut-off-from-api-server"
)

// FailoverOptions configure FailoverCampaign.
type FailoverOptions struct {
	// Seed of the first run; run i uses Seed+i (the random points of the
	// kills and the pause). Runs is how many; zero is one.
	Seed int64
	Runs int
	// Naive runs the replicas with --naive (no fence, no records, no
	// hold), and only the pause: the zombie must be seen acting.
	Naive bool
	// Election is the replicas' election timing; the zero value is
	// FastElection.
	Election Election
}

// FailoverCase is one fault of one run, and what it cost.
type FailoverCase struct {
	Run  int
	Seed int64
	Kind string
	// Leader is the replica hit, Successor the one that took over.
	Leader, Successor string
	// Point says where the leader was hit ("after its work statement 2
	// (DROP ROLE ...)"), Progress how far it had got with the work.
	Point, Progress string
	// Takeover is from the fault to the successor's acquisition (its
	// acquireTime in the Lease); FirstCall to the successor's first
	// PostgreSQL statement after it; Finish to the end of the interrupted
	// work (every object Ready, the namespace gone, the records swept).
	Takeover, FirstCall, Finish time.Duration
	// For the pause and the cut-off: what the replica sent after its
	// lease had passed (sessions, statements, Parse and Bind are
	// violations; Terminate and cancel requests are housekeeping), its
	// bytes, and whether (and how soon after SIGCONT, or the cut) it
	// exited.
	ZombieCalls, ZombieHousekeeping, ZombieBytes int
	// Refused counts the replica's log lines reporting a call the fence
	// refused or ended: the work it would have done.
	Refused   int
	Exited    bool
	ExitAfter time.Duration
}

// FailoverReport is what a failover campaign found.
type FailoverReport struct {
	Result
	Cases []FailoverCase
}

// FailoverCampaign runs the failover scenario Runs times: two replicas of
// the reference operator as processes of their own (copies of this
// executable: see ReplicaMain), elected through the real Lease API, their
// PostgreSQL traffic through a tap that attributes every message to its
// replica. Each run kills the leader at a random point of a burst of
// creates, of a namespace deletion and of a sweep, restarting a standby
// after each, then pauses the leader during a burst until the standby leads
// and has finished it, and wakes it. At the end of each run: no leak, every
// deletion finished, no wrong delete, nothing created twice, no record
// lost, and no session or statement from any replica after its lease
// passed.
func FailoverCampaign(ctx context.Context, o FailoverOptions, env Env, out io.Writer) (FailoverReport, error) {
	rep := FailoverReport{Result: Result{Name: Failover, ExpectViolations: o.Naive}}
	if o.Naive {
		rep.Name = FailoverNaive
	}
	if err := env.check(); err != nil {
		return rep, err
	}
	if o.Election == (Election{}) {
		o.Election = FastElection
	}
	if err := o.Election.check(); err != nil {
		return rep, err
	}
	exe, err := os.Executable()
	if err != nil {
		return rep, fmt.Errorf("failover: the replicas run this executable: %w", err)
	}
	runs := max(o.Runs, 1)
	t0 := time.Now()
	for i := range runs {
		seed := o.Seed + int64(i)
		say(out, "-- failover run %d/%d, seed %d, election %s", i+1, runs, seed, o.Election)
		cases, err := failoverRun(ctx, env, exe, seed, o.Naive, o.Election, out, &rep.Result)
		for j := range cases {
			cases[j].Run, cases[j].Seed = i, seed
		}
		rep.Cases = append(rep.Cases, cases...)
		rep.Runs++
		if err != nil {
			rep.Elapsed = time.Since(t0)
			return rep, fmt.Errorf("failover run with seed %d: %w", seed, err)
		}
	}
	rep.Elapsed = time.Since(t0)
	return rep, nil
}

func runFailover(ctx context.Context, env Env, out io.Writer, naive bool) (Result, error) {
	rep, err := FailoverCampaign(ctx, FailoverOptions{Seed: 1, Naive: naive}, env, out)
	if err == nil {
		for _, c := range rep.Cases {
			rep.note("%s", c)
		}
	}
	return rep.Result, err
}

func (c FailoverCase) String() string {
	s := fmt.Sprintf("%s: %s hit %s, %s; %s took over in %s, first call %s, finished in %s",
		c.Kind, c.Leader, c.Point, c.Progress, c.Successor, c.Takeover.Round(time.Millisecond), c.FirstCall.Round(time.Millisecond), c.Finish.Round(time.Millisecond))
	if c.Kind == CasePause || c.Kind == CasePartition {
		s += fmt.Sprintf("; after its lease passed: %d calls, %d housekeeping messages, %d bytes, %d log lines of calls the fence refused; exited %v", c.ZombieCalls, c.ZombieHousekeeping, c.ZombieBytes, c.Refused, c.Exited)
		if c.Exited {
			s += " after " + c.ExitAfter.Round(time.Millisecond).String()
		}
	}
	return s
}

// failoverWorld is one run: the world (admin client, records namespace,
// scope), the tap, the replicas and the Lease's history.
type failoverWorld struct {
	*world
	env      Env
	rng      *rand.Rand
	tap      *tap
	replicas *replicaSet
	lease    *leaseWatch
	out      io.Writer
	r        *Result
	// main holds the run's long-lived objects; del the namespace deleted
	// under a kill.
	main, del string
}

func failoverRun(ctx context.Context, env Env, exe string, seed int64, naive bool, election Election, out io.Writer, r *Result) (cases []FailoverCase, err error) {
	w, err := newWorld(ctx, env, naive)
	if err != nil {
		return nil, err
	}
	defer w.close()
	u, err := SeedUntagged(ctx, w.db, w.prefix, 3)
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := u.Drop(context.WithoutCancel(ctx), w.db); err == nil {
			err = derr
		}
	}()
	fw := &failoverWorld{world: w, env: env, rng: rand.New(rand.NewPCG(uint64(seed), 0)), out: out, r: r}
	if fw.tap, err = newTap(env.Postgres.Addr()); err != nil {
		return nil, err
	}
	defer fw.tap.close()
	for _, p := range []*string{&fw.main, &fw.del} {
		if *p, err = w.namespace(ctx, "failover-"); err != nil {
			return nil, err
		}
		if err := fw.serverAt(ctx, *p); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "finale-failover-")
	if err != nil {
		return nil, err
	}
	fw.replicas = &replicaSet{exe: exe, kubeconfig: env.ControlPlane.Kubeconfig, recNS: w.recNS, watch: []string{fw.main, fw.del}, dir: dir, naive: naive, election: election, trusted: fw.tap.addr(), all: map[string]*replica{}}
	fw.lease = watchLease(context.WithoutCancel(ctx), w.c, w.recNS)
	defer func() {
		fw.replicas.stopAll()
		fw.lease.close()
		if err != nil || (len(r.Violations) > 0) != naive {
			say(out, "replica logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir) // a temporary directory
	}()
	for range 2 {
		if _, err := fw.replicas.start("r"); err != nil {
			return nil, err
		}
	}
	if _, err := fw.waitLeader(ctx, ""); err != nil {
		return nil, err
	}
	srvs := []client.Object{&v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: fw.main, Name: serverName}}, &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: fw.del, Name: serverName}}}
	if err := w.waitReady(ctx, readyTimeout, srvs...); err != nil {
		return nil, fmt.Errorf("%w%s", err, fw.logs())
	}
	say(out, "replicas up, %s leads", fw.lease.holder().Holder)

	// The sweep first: then its leader has little else to do, and the
	// random point falls in the sweep.
	steps := []func(context.Context) (FailoverCase, error){fw.killDuringSweep, fw.killDuringCreates, fw.killDuringNamespaceDeletion, fw.cutOff, fw.pauseThenWake}
	if naive {
		steps = []func(context.Context) (FailoverCase, error){fw.pauseThenWake}
	}
	for _, step := range steps {
		c, err := step(ctx)
		if c.Kind != "" {
			cases = append(cases, c)
			say(out, "%s", c)
		}
		if err != nil {
			return cases, fmt.Errorf("%w%s", err, fw.logs())
		}
	}
	if err := fw.checkEnd(ctx, u); err != nil {
		return cases, err
	}
	return cases, nil
}

// serverAt creates the credential Secret and the Server in ns, the Server
// pointing at the tap.
func (fw *failoverWorld) serverAt(ctx context.Context, ns string) error {
	return createServer(ctx, fw.c, ns, fw.tap.addr(), fw.env.Postgres.Password)
}

// logs is the tail of every replica's log, for an error.
func (fw *failoverWorld) logs() string {
	fw.replicas.mu.Lock()
	names := make([]string, 0, len(fw.replicas.all))
	for n := range fw.replicas.all {
		names = append(names, n)
	}
	fw.replicas.mu.Unlock()
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "\n--- replica %s (last lines)\n%s", n, fw.replicas.get(n).tail(15))
	}
	return b.String()
}

const takeoverBound = 60 * time.Second

// waitLeader waits until a replica other than not holds the lease.
func (fw *failoverWorld) waitLeader(ctx context.Context, not string) (term, error) {
	var t term
	err := controlplane.WaitFor(ctx, takeoverBound, "a leader other than "+strconv.Quote(not), func(context.Context) (bool, error) {
		t = fw.lease.holder()
		return t.Holder != "" && t.Holder != not, nil
	})
	return t, err
}

// trigger fires an action once, from the tap, when a replica (any, for
// "") has reached its point since it was armed, or when fire is called
// first. The action gets the replica that sent it.
type trigger struct {
	once  sync.Once
	fired chan struct{}
	// at, point and who are written before fired is closed.
	at         time.Time
	point, who string
	armed      time.Time
}

// point is where a fault hits a replica: right after it sent its k-th
// statement of the work (one starting with a prefix in work: a CREATE, a
// DROP), or for k == 0 right after its first statement of any kind, before
// the work proper (its checks and proofs under way). Counting the work's
// own statements spreads the points over the work: the checks around each
// create or drop outnumber them and vary in number.
type point struct {
	k    int
	work []string
}

// pointIn draws a point uniformly among the start and the n statements of
// the work.
func (fw *failoverWorld) pointIn(n int, work ...string) point {
	return point{k: fw.rng.IntN(n + 1), work: work}
}

// counts reports whether a statement counts towards the point.
func (p point) counts(sql string) bool {
	if p.k == 0 {
		return true
	}
	for _, w := range p.work {
		if strings.HasPrefix(sql, w) {
			return true
		}
	}
	return false
}

func (p point) at(sql string) string {
	if p.k == 0 {
		return fmt.Sprintf("after its first statement (%s), before the work", sql)
	}
	return fmt.Sprintf("after its work statement %d (%s)", p.k, sql)
}

func (fw *failoverWorld) arm(replica string, p point, act func(*replica) time.Time) *trigger {
	tr := &trigger{fired: make(chan struct{}), armed: time.Now()}
	target := int64(max(p.k, 1))
	var n atomic.Int64
	fw.tap.mu.Lock()
	fw.tap.onEvent = func(e wireEvent) {
		if e.Kind != wireStatement || e.Replica == "" || (replica != "" && e.Replica != replica) || !p.counts(e.SQL) {
			return
		}
		if n.Add(1) == target {
			tr.fire(fw.replicas.get(e.Replica), act, p.at(e.SQL))
		}
	}
	fw.tap.mu.Unlock()
	return tr
}

func (tr *trigger) fire(r *replica, act func(*replica) time.Time, point string) {
	tr.once.Do(func() {
		tr.at, tr.point, tr.who = act(r), point, r.name
		close(tr.fired)
	})
}

func (fw *failoverWorld) disarm() {
	fw.tap.mu.Lock()
	fw.tap.onEvent = nil
	fw.tap.mu.Unlock()
}

// hit arms act on the leader's point p, runs work, and fires act at the
// end of work if the leader had not reached p by then. A nil
// leader is whichever replica sends the statements (the one that will
// lead), which must then be known by the end of work.
func (fw *failoverWorld) hit(ctx context.Context, leader *replica, p point, act func(*replica) time.Time, work func(ctx context.Context, fired <-chan struct{}) error) (*trigger, error) {
	name := ""
	if leader != nil {
		name = leader.name
	}
	tr := fw.arm(name, p, act)
	defer fw.disarm()
	if err := work(ctx, tr.fired); err != nil {
		return tr, err
	}
	select {
	case <-tr.fired:
		return tr, nil
	default:
	}
	if leader == nil {
		var err error
		if leader, err = fw.leader(); err != nil {
			return tr, err
		}
	}
	tr.fire(leader, act, fmt.Sprintf("at the end of the work (it sent fewer than %d of its statements)", max(p.k, 1)))
	return tr, nil
}

// progress counts the statements starting with one of prefixes that the
// hit replica ran between the arming and the hit, of total.
func (fw *failoverWorld) progress(tr *trigger, total int, what string, prefixes ...string) string {
	n := 0
	for _, e := range fw.tap.snapshot() {
		if e.Replica != tr.who || e.Kind != wireStatement || e.At.Before(tr.armed) || e.At.After(tr.at) {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(e.SQL, p) {
				n++
				break
			}
		}
	}
	return fmt.Sprintf("having %s %d of %d", what, n, total)
}

func kill(r *replica) time.Time  { return r.kill() }
func pause(r *replica) time.Time { return r.pause() }

// untilFired waits for cond, or returns early once fired is closed.
func untilFired(ctx context.Context, fired <-chan struct{}, what string, cond func(ctx context.Context) (bool, error)) error {
	return controlplane.WaitFor(ctx, readyTimeout, what, func(ctx context.Context) (bool, error) {
		select {
		case <-fired:
			return true, nil
		default:
		}
		return cond(ctx)
	})
}

// allReady reports whether every object is Ready.
func (fw *failoverWorld) allReady(ctx context.Context, objs []client.Object) (bool, error) {
	for _, o := range objs {
		if err := fw.c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return false, err
		}
		if !ready(o) {
			return false, nil
		}
	}
	return true, nil
}

// successor waits for the takeover after a fault at t on leader, and for
// the successor's first statement after its acquisition.
func (fw *failoverWorld) successor(ctx context.Context, c *FailoverCase, leader string, t time.Time) error {
	next, err := fw.waitLeader(ctx, leader)
	if err != nil {
		return err
	}
	c.Successor, c.Takeover = next.Holder, next.Acquired.Sub(t)
	return controlplane.WaitFor(ctx, readyTimeout, next.Holder+"'s first statement", func(context.Context) (bool, error) {
		for _, e := range fw.tap.snapshot() {
			if e.Replica == next.Holder && e.Kind == wireStatement && !e.At.Before(next.Acquired) {
				c.FirstCall = e.At.Sub(t)
				return true, nil
			}
		}
		return false, nil
	})
}

// leader is the replica holding the lease now.
func (fw *failoverWorld) leader() (*replica, error) {
	h := fw.lease.holder().Holder
	r := fw.replicas.get(h)
	if r == nil || !r.running() {
		return nil, fmt.Errorf("failover: the lease holder %q is not a running replica", h)
	}
	return r, nil
}

func (fw *failoverWorld) burst(ctx context.Context, ns, prefix string, roles, dbs int) ([]client.Object, error) {
	var objs []client.Object
	for i := range roles {
		objs = append(objs, fw.role(ns, fmt.Sprintf("%sr%d", prefix, i)))
	}
	for i := range dbs {
		objs = append(objs, fw.database(ns, fmt.Sprintf("%sd%d", prefix, i)))
	}
	for _, o := range objs {
		if err := fw.create(ctx, o); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// killDuringCreates kills the leader at a random point of a burst
// of creates; the standby finishes the burst.
func (fw *failoverWorld) killDuringCreates(ctx context.Context) (FailoverCase, error) {
	c := FailoverCase{Kind: CaseBurst}
	if _, err := fw.hitDuringBurst(ctx, &c, "b", 8, 2, kill, FaultLeaderKill); err != nil {
		return c, err
	}
	_, err := fw.replicas.start("r")
	return c, err
}

// hitDuringBurst acts on the leader (act) at a random point of a burst of
// roles and dbs creates named from prefix, records fault, and waits until
// a successor leads and the burst is Ready: c gets the leader, the point,
// the progress, the takeover and the finish. It returns the leader hit.
func (fw *failoverWorld) hitDuringBurst(ctx context.Context, c *FailoverCase, prefix string, roles, dbs int, act func(*replica) time.Time, fault string) (*replica, error) {
	leader, err := fw.leader()
	if err != nil {
		return nil, err
	}
	c.Leader = leader.name
	var objs []client.Object
	tr, err := fw.hit(ctx, leader, fw.pointIn(roles+dbs, "CREATE ROLE", "CREATE DATABASE"), act, func(ctx context.Context, fired <-chan struct{}) error {
		if objs, err = fw.burst(ctx, fw.main, prefix, roles, dbs); err != nil {
			return err
		}
		return untilFired(ctx, fired, "the burst Ready", func(ctx context.Context) (bool, error) { return fw.allReady(ctx, objs) })
	})
	if err != nil {
		return leader, err
	}
	fw.r.fault(fault)
	c.Point, c.Progress = tr.point, fw.progress(tr, len(objs), "created", "CREATE ROLE", "CREATE DATABASE")
	if err := fw.successor(ctx, c, leader.name, tr.at); err != nil {
		return leader, err
	}
	if err := fw.waitReady(ctx, readyTimeout, objs...); err != nil {
		return leader, err
	}
	c.Finish = time.Since(tr.at)
	return leader, nil
}

// killDuringNamespaceDeletion fills the second namespace, deletes it, and
// kills the leader at a random point of the deletion (among its drops).
func (fw *failoverWorld) killDuringNamespaceDeletion(ctx context.Context) (FailoverCase, error) {
	c := FailoverCase{Kind: CaseNamespace}
	objs, err := fw.burst(ctx, fw.del, "n", 3, 1)
	if err != nil {
		return c, err
	}
	if err := fw.waitReady(ctx, readyTimeout, objs...); err != nil {
		return c, err
	}
	objs = append(objs, &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: fw.del, Name: serverName}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fw.del, Name: secretName}})
	leader, err := fw.leader()
	if err != nil {
		return c, err
	}
	c.Leader = leader.name
	gone := func(ctx context.Context) (bool, error) {
		err := fw.c.Get(ctx, client.ObjectKey{Name: fw.del}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	tr, err := fw.hit(ctx, leader, fw.pointIn(len(objs)-2, "DROP ROLE", "DROP DATABASE"), kill, func(ctx context.Context, fired <-chan struct{}) error {
		if err := fw.deleteNamespace(ctx, fw.del); err != nil {
			return err
		}
		return untilFired(ctx, fired, "namespace "+fw.del+" gone", gone)
	})
	if err != nil {
		return c, err
	}
	fw.r.fault(FaultLeaderKill)
	c.Point, c.Progress = tr.point, fw.progress(tr, len(objs)-2, "dropped", "DROP ROLE", "DROP DATABASE")
	if err := fw.successor(ctx, &c, leader.name, tr.at); err != nil {
		return c, err
	}
	vs, err := CheckFinished(ctx, fw.c, fw.env.bound(), objs...)
	if err != nil {
		return c, err
	}
	fw.r.add(vs...)
	if err := controlplane.WaitFor(ctx, fw.env.bound(), "namespace "+fw.del+" gone", gone); err != nil {
		fw.r.add(Violation{Finished, fmt.Sprintf("namespace %s not gone after %s", fw.del, fw.env.bound())})
	}
	c.Finish = time.Since(tr.at)
	_, err = fw.replicas.start("r")
	return c, err
}

// killDuringSweep leaves records of owners that are gone (their Roles
// deleted, finalizer and all, while no replica runs), starts two fresh
// replicas, and kills the leader at a random point of its sweep (after its
// first statement, or after one of its drops). The successor finishes the
// sweep.
func (fw *failoverWorld) killDuringSweep(ctx context.Context) (FailoverCase, error) {
	c := FailoverCase{Kind: CaseSweep}
	objs, err := fw.burst(ctx, fw.main, "s", 4, 0)
	if err != nil {
		return c, err
	}
	if err := fw.waitReady(ctx, readyTimeout, objs...); err != nil {
		return c, err
	}
	// The owners go without their delete: no replica runs, and each
	// loses its finalizer, so nothing but the sweeper can drop their
	// roles.
	fw.replicas.stopAll()
	uids := map[types.UID]string{}
	for _, o := range objs {
		uids[o.GetUID()] = o.(*v1alpha1.Role).Spec.RoleName
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		if err := fw.c.Patch(ctx, o, patch); err != nil {
			return c, fmt.Errorf("strip the finalizer of %s: %w", o.GetName(), err)
		}
		if err := client.IgnoreNotFound(fw.c.Delete(ctx, o)); err != nil {
			return c, err
		}
	}
	if err := controlplane.WaitFor(ctx, readyTimeout, "the owners gone", func(ctx context.Context) (bool, error) {
		for _, o := range objs {
			if err := fw.c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
		}
		return true, nil
	}); err != nil {
		return c, err
	}
	before := fw.lease.holder().Holder
	swept := func(ctx context.Context) (bool, error) {
		for uid, name := range uids {
			err := fw.c.Get(ctx, client.ObjectKey{Namespace: fw.recNS, Name: ledger.NamePrefix + string(uid)}, &corev1.ConfigMap{})
			if err == nil {
				return false, nil
			}
			if !apierrors.IsNotFound(err) {
				return false, err
			}
			if ok, err := fw.roleExists(ctx, name); err != nil || ok {
				return false, err
			}
		}
		return true, nil
	}
	// Armed before the replicas start: the leader's first statements are
	// its sweep (and its Servers' checks), and it may sweep at once.
	tr, err := fw.hit(ctx, nil, fw.pointIn(len(uids), "DROP ROLE"), kill, func(ctx context.Context, fired <-chan struct{}) error {
		for range 2 {
			if _, err := fw.replicas.start("r"); err != nil {
				return err
			}
		}
		if _, err := fw.waitLeader(ctx, before); err != nil {
			return err
		}
		return untilFired(ctx, fired, "the records swept", swept)
	})
	if err != nil {
		return c, err
	}
	fw.r.fault(FaultLeaderKill)
	c.Leader, c.Point, c.Progress = tr.who, tr.point, fw.progress(tr, len(uids), "dropped", "DROP ROLE")
	if err := fw.successor(ctx, &c, tr.who, tr.at); err != nil {
		return c, err
	}
	if err := controlplane.WaitFor(ctx, fw.env.bound(), "the records swept", swept); err != nil {
		fw.r.add(Violation{Finished, fmt.Sprintf("the sweep of %d forced deletions did not finish within %s", len(uids), fw.env.bound())})
	}
	c.Finish = time.Since(tr.at)
	_, err = fw.replicas.start("r")
	return c, err
}

func (fw *failoverWorld) roleExists(ctx context.Context, name string) (bool, error) {
	rows, err := fw.db.Query(ctx, "SELECT 1 FROM pg_roles WHERE rolname = $1", name)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	ok := rows.Next()
	return ok, rows.Err()
}

// exitBound is how long a woken zombie, or a leader cut off from the API
// server, may take to notice it lost its lease and exit.
const exitBound = 30 * time.Second

// cutOff resets and refuses the leader's connections to the API server
// at a random point of a burst, PostgreSQL still reachable: it
// cannot renew, must stop calling PostgreSQL before the standby can lead,
// and exit. The standby finishes the burst.
func (fw *failoverWorld) cutOff(ctx context.Context) (FailoverCase, error) {
	c := FailoverCase{Kind: CasePartition}
	leader, err := fw.leader()
	if err != nil {
		return c, err
	}
	c.Leader = leader.name
	cut := func(r *replica) time.Time {
		now := time.Now()
		r.api.Refuse(true)
		r.api.ResetAll()
		return now
	}
	var objs []client.Object
	tr, err := fw.hit(ctx, leader, fw.pointIn(5, "CREATE ROLE"), cut, func(ctx context.Context, fired <-chan struct{}) error {
		if objs, err = fw.burst(ctx, fw.main, "c", 5, 0); err != nil {
			return err
		}
		return untilFired(ctx, fired, "the burst Ready", func(ctx context.Context) (bool, error) { return fw.allReady(ctx, objs) })
	})
	if err != nil {
		return c, err
	}
	fw.r.fault(FaultLeaderPartition)
	c.Point, c.Progress = tr.point, fw.progress(tr, len(objs), "created", "CREATE ROLE")
	if err := fw.successor(ctx, &c, leader.name, tr.at); err != nil {
		return c, err
	}
	if err := fw.waitReady(ctx, readyTimeout, objs...); err != nil {
		return c, err
	}
	c.Finish = time.Since(tr.at)
	var at time.Time
	if at, c.Exited = leader.waitExit(ctx, exitBound); c.Exited {
		c.ExitAfter = at.Sub(tr.at)
	} else {
		fw.r.note("%s, cut off from the API server, did not exit within %s; killed", leader.name, exitBound)
		leader.kill()
	}
	fw.zombie(&c, leader)
	_, err = fw.replicas.start("r")
	return c, err
}

// zombie counts what the replica sent PostgreSQL after its lease passed,
// and the calls its log says the fence refused.
func (fw *failoverWorld) zombie(c *FailoverCase, r *replica) {
	if b, err := os.ReadFile(r.log.Name()); err == nil {
		c.Refused = strings.Count(string(b), clientpool.ErrFenced.Error())
	}
	lost := lostAt(fw.lease.history())[r.name]
	for _, e := range fw.tap.snapshot() {
		if e.Replica != r.name || e.At.Before(lost) {
			continue
		}
		c.ZombieBytes += e.Bytes
		switch e.Kind {
		case wireSession, wireStatement, wirePrepare:
			c.ZombieCalls++
		case wireTerminate, wireCancel:
			c.ZombieHousekeeping++
		}
	}
}

// pauseThenWake stops the leader at a random point of a burst,
// waits until the standby leads and has finished the burst, then wakes the
// stopped one: it must send nothing, and exit.
func (fw *failoverWorld) pauseThenWake(ctx context.Context) (FailoverCase, error) {
	c := FailoverCase{Kind: CasePause}
	leader, err := fw.hitDuringBurst(ctx, &c, "p", 6, 1, pause, FaultLeaderPause)
	if err != nil {
		return c, err
	}
	woke := leader.resume()
	var at time.Time
	if at, c.Exited = leader.waitExit(ctx, exitBound); c.Exited {
		c.ExitAfter = at.Sub(woke)
	} else {
		fw.r.note("%s did not exit within %s of waking; killed", leader.name, exitBound)
		leader.kill()
	}
	fw.zombie(&c, leader)
	return c, nil
}

// checkEnd checks what the run left: nothing created twice and no record
// lost while the objects live, then deletes the main namespace and checks
// that it finished, nothing leaked, nothing untagged was dropped, and no
// replica called PostgreSQL after losing its lease.
func (fw *failoverWorld) checkEnd(ctx context.Context, u Untagged) error {
	tagged, err := ListTagged(ctx, fw.db, fw.scope())
	if err != nil {
		return err
	}
	per := map[string][]string{}
	for _, t := range tagged {
		if uid := t.UID(); uid != "" {
			per[t.Kind+" "+uid] = append(per[t.Kind+" "+uid], t.Name)
		}
	}
	for owner, names := range per {
		if len(names) > 1 {
			fw.r.add(Violation{NoDuplicate, fmt.Sprintf("%s has %d objects in PostgreSQL: %s", owner, len(names), strings.Join(names, ", "))})
		}
	}
	var live []client.Object
	var roles v1alpha1.RoleList
	var dbs v1alpha1.DatabaseList
	if err := fw.c.List(ctx, &roles, client.InNamespace(fw.main)); err != nil {
		return err
	}
	if err := fw.c.List(ctx, &dbs, client.InNamespace(fw.main)); err != nil {
		return err
	}
	for i := range roles.Items {
		live = append(live, &roles.Items[i])
	}
	for i := range dbs.Items {
		live = append(live, &dbs.Items[i])
	}
	if !fw.naive {
		for _, o := range live {
			err := fw.c.Get(ctx, client.ObjectKey{Namespace: fw.recNS, Name: ledger.NamePrefix + string(o.GetUID())}, &corev1.ConfigMap{})
			if apierrors.IsNotFound(err) {
				fw.r.add(Violation{NoLostRecord, fmt.Sprintf("%T %s/%s is live without its cleanup record", o, o.GetNamespace(), o.GetName())})
			} else if err != nil {
				return err
			}
		}
	}
	live = append(live, &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: fw.main, Name: serverName}})
	if err := fw.deleteNamespace(ctx, fw.main); err != nil {
		return err
	}
	vs, err := CheckFinished(ctx, fw.c, fw.env.bound(), live...)
	if err != nil {
		return err
	}
	fw.r.add(vs...)
	if fw.naive {
		// Tidy the naive run: stuck objects and leaks.
		if err := fw.release(ctx, fw.main); err != nil {
			return err
		}
		rec := ""
		vs, err := CheckNoLeak(ctx, fw.db, fw.c, rec, fw.scope())
		if err != nil {
			return err
		}
		fw.r.add(vs...)
		if err := dropTagged(ctx, fw.db, Scope{NamePrefix: fw.prefix}); err != nil {
			return err
		}
	} else {
		vs, err := CheckNoLeak(ctx, fw.db, fw.c, fw.recNS, fw.scope())
		if err != nil {
			return err
		}
		fw.r.add(vs...)
	}
	if vs, err = CheckNoWrongDelete(ctx, fw.db, u); err != nil {
		return err
	}
	fw.r.add(vs...)
	fw.r.add(zombieCalls(fw.lease.history(), fw.tap.snapshot())...)
	return nil
}

// zombieCalls are the sessions and statements each replica sent after its
// lease passed to another, and the connections the tap could not
// attribute (which might be such calls).
func zombieCalls(terms []term, events []wireEvent) []Violation {
	lost := lostAt(terms)
	type key struct{ replica, kind string }
	late := map[key]int{}
	first := map[key]time.Duration{}
	for _, e := range events {
		call := e.Kind == wireSession || e.Kind == wireStatement || e.Kind == wirePrepare
		if e.Kind == wireOpaque || (e.Replica == "" && call) {
			late[key{"(unattributed)", e.Kind}]++
			continue
		}
		l, ok := lost[e.Replica]
		if !ok || e.At.Before(l) || !call {
			continue
		}
		k := key{e.Replica, e.Kind}
		if late[k] == 0 {
			first[k] = e.At.Sub(l)
		}
		late[k]++
	}
	var out []Violation
	for k, n := range late {
		d := fmt.Sprintf("%s sent %d %s message(s) after its lease passed", k.replica, n, k.kind)
		if k.replica == "(unattributed)" {
			d = fmt.Sprintf("%d connection(s) or message(s) of kind %s the tap could not attribute to a replica", n, k.kind)
		} else {
			d += fmt.Sprintf(" (the first %s after)", first[k].Round(time.Millisecond))
		}
		out = append(out, Violation{NoZombieCall, d})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Detail < out[j].Detail })
	return out
}

// Table prints the campaign's result, then per case kind the takeover,
// first-call and finish times (min, median, max) and, for the pause, what
// the woken replicas sent.
func (r FailoverReport) Table(w io.Writer) error {
	if err := r.Result.Table(w); err != nil {
		return err
	}
	seen := map[Invariant]bool{}
	for _, v := range r.Violations {
		seen[v.Invariant] = true
	}
	for _, inv := range []Invariant{NoDuplicate, NoLostRecord, NoZombieCall} {
		if !seen[inv] { // Result.Table prints the count of those it saw
			if _, err := fmt.Fprintf(w, "violations: %s  0\n", inv); err != nil {
				return err
			}
		}
	}
	byKind := map[string][]FailoverCase{}
	for _, c := range r.Cases {
		byKind[c.Kind] = append(byKind[c.Kind], c)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tn\ttakeover (min/median/max)\tfirst call\tfinish\tzombie calls\tzombie housekeeping\tzombie bytes\trefused by the fence\texited")
	for _, kind := range []string{CaseBurst, CaseNamespace, CaseSweep, CasePartition, CasePause} {
		cs := byKind[kind]
		if len(cs) == 0 {
			continue
		}
		var calls, house, bytes, refused, exited int
		for _, c := range cs {
			calls, house, bytes, refused = calls+c.ZombieCalls, house+c.ZombieHousekeeping, bytes+c.ZombieBytes, refused+c.Refused
			if c.Exited {
				exited++
			}
		}
		zc, zh, zb, zr, ex := "-", "-", "-", "-", "-"
		if kind == CasePause || kind == CasePartition {
			zc, zh, zb, zr, ex = strconv.Itoa(calls), strconv.Itoa(house), strconv.Itoa(bytes), strconv.Itoa(refused), fmt.Sprintf("%d/%d", exited, len(cs))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", kind, len(cs),
			spread(cs, func(c FailoverCase) time.Duration { return c.Takeover }),
			spread(cs, func(c FailoverCase) time.Duration { return c.FirstCall }),
			spread(cs, func(c FailoverCase) time.Duration { return c.Finish }), zc, zh, zb, zr, ex)
	}
	return tw.Flush()
}

func spread(cs []FailoverCase, f func(FailoverCase) time.Duration) string {
	ds := make([]time.Duration, 0, len(cs))
	for _, c := range cs {
		ds = append(ds, f(c))
	}
	slices.Sort(ds)
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	return r(ds[0]) + " / " + r(ds[len(ds)/2]) + " / " + r(ds[len(ds)-1])
}
