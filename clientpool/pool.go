package clientpool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/finale-dev/finale/errclass"
)

// ErrClosed is returned by Do, Acquire and Put after Close.
var ErrClosed = errors.New("clientpool: pool is closed")

// ErrFenced is wrapped by Do's error when the pool's Fence has passed: the
// call was not started, or its context was ended at the fence. It never
// evicts; ClassifyFenced makes it Canceled for callers' classifiers.
var ErrFenced = errors.New("clientpool: fenced: this replica may no longer hold the lease it acts under")

// Fence bounds when the pool may still call out: for a leader-elected
// replica, the point after which another replica may hold the lease
// (fence.Lock implements it).
type Fence interface {
	// Until is when the fence passes, on the pool's clock; the zero time
	// means it has (no lease held).
	Until() time.Time
}

// ClassifyFenced is an errclass.Func that makes ErrFenced Canceled: the
// replica stepped back, the client is not at fault.
func ClassifyFenced(_ context.Context, err error) (errclass.Class, bool) {
	if errors.Is(err, ErrFenced) {
		return errclass.Canceled, true
	}
	return "", false
}

// Eviction reasons that are not error classes, for the evictions metric.
const (
	reasonMaxAge  = "MaxAge"
	reasonIdle    = "IdleTimeout"
	reasonManual  = "Evict"
	reasonClosing = "PoolClosed"
	reasonReplace = "Replaced"
	// reasonNotAfter: the client reached the NotAfter its dial returned.
	reasonNotAfter = "NotAfter"
)

// DefaultDialTimeout bounds a dial when Options.DialTimeout is zero. The
// dial is shared by every caller waiting on the key, so it cannot use any
// one caller's deadline.
const DefaultDialTimeout = 30 * time.Second

// Dialer makes a client for a key.
type Dialer[K comparable, C any] interface {
	Dial(ctx context.Context, key K) (C, error)
}

// DialFn adapts a function to Dialer.
type DialFn[K comparable, C any] func(ctx context.Context, key K) (C, error)

// Dial calls f.
func (f DialFn[K, C]) Dial(ctx context.Context, key K) (C, error) { return f(ctx, key) }

// Closer releases a client the pool no longer holds.
type Closer[C any] interface {
	Close(c C) error
}

// CloseFn adapts a function to Closer.
type CloseFn[C any] func(c C) error

// Close calls f.
func (f CloseFn[C]) Close(c C) error { return f(c) }

// Policy decides whether a call's error means the client is broken and must
// be dropped. It sees the class the pool's classifier gave the error and the
// error itself.
type Policy interface {
	Evict(class errclass.Class, err error) bool
}

// PolicyFn adapts a function to Policy.
type PolicyFn func(class errclass.Class, err error) bool

// Evict calls f.
func (f PolicyFn) Evict(class errclass.Class, err error) bool { return f(class, err) }

// EvictOn is the Policy that evicts on exactly the given classes.
func EvictOn(classes ...errclass.Class) Policy {
	set := make(map[errclass.Class]bool, len(classes))
	for _, c := range classes {
		set[c] = true
	}
	return PolicyFn(func(c errclass.Class, _ error) bool { return set[c] })
}

// DefaultPolicy evicts on Transport, Auth and Identity only: a connection
// that does not answer, credentials the server rejects, or a server whose
// certificate does not verify (new trust material needs a new dial). NotFound, Conflict, Invalid,
// Throttled and Canceled are answers from a working client (or the caller
// giving up) and never evict; churning clients on throttling makes it worse.
var DefaultPolicy = EvictOn(errclass.Transport, errclass.Auth, errclass.Identity)

// NeverEvict keeps every client whatever its calls return: the behaviour of
// the upstream pool before the seed incident's fix. For tests and
// comparisons; do not use it in production.
var NeverEvict Policy = PolicyFn(func(errclass.Class, error) bool { return false })

// Options configure a Pool. Dial is required.
type Options[K comparable, C any] struct {
	// Name labels the pool's metrics, so several pools coexist. Default
	// "default".
	Name string
	// Dial makes a client for a key. Required. A DialedFn also says when
	// each client expires (Dialed.NotAfter).
	Dial Dialer[K, C]
	// Close releases a client; nil means clients need no closing. CloseFn
	// adapts a func(C) error, CloseFunc a func(C).
	Close Closer[C]
	// Policy decides eviction; nil is DefaultPolicy.
	Policy Policy
	// Classifier classifies call errors; nil is errclass.Default.
	Classifier *errclass.Classifier
	// Clock drives MaxAge, IdleTimeout and the Fence; nil is the real
	// clock.
	Clock clock.PassiveClock
	// MaxAge, when positive, retires a client that old at its next use, so
	// a slowly rotting connection is replaced even if it never fails.
	MaxAge time.Duration
	// IdleTimeout, when positive, retires a client unused that long.
	IdleTimeout time.Duration
	// CallTimeout, when positive, bounds each call (Do's fn, a Lease's
	// hold). When it fires the error classifies as Transport and (by
	// DefaultPolicy) evicts: this is what turns the seed incident's silent
	// connection into a recovery. When the caller's own deadline is nearer
	// than CallTimeout, the bound is nine tenths of the caller's remaining
	// time instead, so that it still fires first: a caller deadline that
	// fires first classifies as Canceled and would never evict (see
	// callDeadline). A call that ignores its context and is still running
	// a grace after the bound (a twentieth of the bound, at most a second)
	// is abandoned: Do returns, the client is evicted and closed.
	// Without CallTimeout, Do waits for fn however long it takes.
	CallTimeout time.Duration
	// DialTimeout bounds a dial; zero is DefaultDialTimeout.
	DialTimeout time.Duration
	// Fence, when set, is the point after which nothing may be sent: Do
	// and dials refuse to start once it has passed (ErrFenced), and every
	// call's and dial's context ends there. Nil is unfenced.
	Fence Fence
}

// Pool caches clients by connection identity K and is the call site API for
// them: every use goes through Do or a Lease, so every error is classified
// and the eviction policy applies everywhere, not only where someone
// remembered it.
//
// K must identify everything a client is bound to at dial time (endpoint,
// namespace, auth mode, the name of the credential Secret), and nothing
// secret: keys appear in error messages.
type Pool[K comparable, C any] struct {
	name        string
	dial        DialedFn[K, C]
	closer      Closer[C]
	policy      Policy
	classifier  *errclass.Classifier
	clock       clock.PassiveClock
	maxAge      time.Duration
	idle        time.Duration
	callTimeout time.Duration
	dialTimeout time.Duration
	fence       Fence
	sweepEvery  time.Duration
	m           metrics

	mu sync.Mutex
	// entries holds the live client per key; guarded by mu.
	entries map[K]*entry[C]
	// flights holds the dial in progress per key; guarded by mu.
	flights map[K]*flight[C]
	// closed is set by Close; guarded by mu.
	closed bool
	// lastSweep is when expired entries were last looked for; guarded by mu.
	lastSweep time.Time
}

// entry is one cached client. Every field but client, born and notAfter is
// guarded by the pool's mu.
type entry[C any] struct {
	client   C
	born     time.Time
	notAfter time.Time // zero: no expiry of its own
	lastUsed time.Time
	// refs counts calls running with this client, abandoned ones included
	// until they return.
	refs int
	// retired is set when the entry leaves the map; nothing acquires it
	// after that. The client is closed when refs drops to zero after that,
	// or at once when a call on it is abandoned.
	retired bool
	// closed is set, under mu, by whichever path closes the client, before
	// it does: the client is closed exactly once.
	closed bool
}

// flight is one dial shared by every caller of the key that arrives while it
// runs. e and err are written before done is closed.
type flight[C any] struct {
	done chan struct{}
	e    *entry[C]
	err  error
}

// New returns a pool. It fails when Dial is missing or a duration is
// negative.
func New[K comparable, C any](o Options[K, C]) (*Pool[K, C], error) {
	if o.Dial == nil {
		return nil, errors.New("clientpool: Options.Dial is required")
	}
	for what, d := range map[string]time.Duration{"MaxAge": o.MaxAge, "IdleTimeout": o.IdleTimeout, "CallTimeout": o.CallTimeout, "DialTimeout": o.DialTimeout} {
		if d < 0 {
			return nil, fmt.Errorf("clientpool: Options.%s is %v; use a positive duration, or 0 to turn it off", what, d)
		}
	}
	p := &Pool[K, C]{
		name:        o.Name,
		dial:        dialedOf(o.Dial),
		closer:      o.Close,
		policy:      o.Policy,
		classifier:  o.Classifier,
		clock:       o.Clock,
		maxAge:      o.MaxAge,
		idle:        o.IdleTimeout,
		callTimeout: o.CallTimeout,
		dialTimeout: o.DialTimeout,
		fence:       o.Fence,
		entries:     map[K]*entry[C]{},
		flights:     map[K]*flight[C]{},
	}
	if p.name == "" {
		p.name = "default"
	}
	if p.policy == nil {
		p.policy = DefaultPolicy
	}
	if p.classifier == nil {
		p.classifier = errclass.Default
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	if p.dialTimeout == 0 {
		p.dialTimeout = DefaultDialTimeout
	}
	switch {
	case p.maxAge > 0 && p.idle > 0:
		p.sweepEvery = min(p.maxAge, p.idle) / 2
	case p.maxAge > 0:
		p.sweepEvery = p.maxAge / 2
	case p.idle > 0:
		p.sweepEvery = p.idle / 2
	}
	p.m = newMetrics(p.name)
	p.lastSweep = p.clock.Now()
	return p, nil
}

// callerShare is the part of a caller's remaining time that a call may use
// when the caller's deadline is nearer than CallTimeout: nine tenths. The
// tenth left over makes the pool's bound fire strictly before the caller's
// (timers a few milliseconds apart can fire out of order on a loaded
// machine; a tenth scales with the deadline) and leaves the caller time to
// report the failure (a status write, an Event) before its own deadline.
const (
	callerShareNum = 9
	callerShareDen = 10
)

// callDeadline is the pool's own bound of a call started at now: timeout
// from now, or, when the caller's deadline comes sooner, nine tenths of the
// caller's remaining time, so that the pool's bound fires first and a hung
// call is told apart from a caller giving up. It is false when the caller
// has no time left: the call then runs under the caller's context alone
// and its failure is the caller's (Canceled), never the client's.
//
// A call that has used nine tenths of its caller's time is taken for hung
// even if CallTimeout is longer: the pool cannot wait past its caller, and
// a caller that sets a deadline shorter than a healthy call's duration
// fails that call either way.
func callDeadline(now time.Time, timeout time.Duration, caller time.Time, hasCaller bool) (time.Time, bool) {
	if !hasCaller {
		return now.Add(timeout), true
	}
	share := caller.Sub(now) / callerShareDen * callerShareNum
	if share <= 0 {
		return time.Time{}, false
	}
	return now.Add(min(timeout, share)), true
}

// fenced returns ctx ended at until (on the pool's clock), with cause
// ErrFenced.
func (p *Pool[K, C]) fenced(ctx context.Context, until time.Time) (context.Context, context.CancelFunc) {
	inner, cancelCause := context.WithCancelCause(ctx)
	// The timer runs on real time: it gets what is left on the pool's
	// clock.
	timed, cancel := context.WithDeadlineCause(inner, time.Now().Add(until.Sub(p.clock.Now())), ErrFenced)
	fc := &fenceContext{Context: timed, clock: p.clock, until: until, end: cancelCause}
	return fc, func() { cancel(); cancelCause(context.Canceled) }
}

// fenceContext ends at the fence. Its Done and Err read the clock each
// time they are called rather than wait for the timer: a process stopped
// (SIGSTOP) past its fence runs its goroutines again before the runtime
// has fired the timers that came due while it slept, and a client that
// checks its context before each request (pgx does) then sees the fence
// passed at once. Contexts derived from it inside fn see it end when the
// timer fires or when this one is next checked.
type fenceContext struct {
	context.Context
	clock clock.PassiveClock
	until time.Time
	end   context.CancelCauseFunc
}

func (c *fenceContext) check() {
	if !c.clock.Now().Before(c.until) {
		c.end(ErrFenced)
	}
}

// Done implements context.Context.
func (c *fenceContext) Done() <-chan struct{} {
	c.check()
	return c.Context.Done()
}

// Err implements context.Context.
func (c *fenceContext) Err() error {
	c.check()
	return c.Context.Err()
}

// Evict drops key's client now (closing it once its calls return) and
// reports whether there was one. The next Do dials afresh.
func (p *Pool[K, C]) Evict(key K) bool {
	p.mu.Lock()
	e, ok := p.entries[key]
	p.mu.Unlock()
	if !ok {
		return false
	}
	return p.retire(key, e, reasonManual)
}

// Put makes c key's client, as if dialled now: the next call for key gets
// it. A client key already had is retired (reason Replaced) and closed
// once its calls return. From then on the pool owns c and closes it with
// Options.Close. It is the supported way for a test to seed a client (a
// fake, one on a faulty transport) and for code moving to the pool to hand
// over clients it made itself. A dial of key already in flight replaces c
// when it lands. After Close it returns ErrClosed and does not take c.
func (p *Pool[K, C]) Put(key K, c C) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	now := p.clock.Now()
	var replaced *entry[C]
	if old, ok := p.entries[key]; ok && p.retireLocked(key, old, reasonReplace) {
		replaced = old
	}
	p.entries[key] = &entry[C]{client: c, born: now, lastUsed: now}
	p.m.clients.Inc()
	p.mu.Unlock()
	if replaced != nil {
		_ = p.closeClient(replaced.client) // counted in closes_total; a late close has no caller to tell
	}
	return nil
}

// Len is the number of cached clients.
func (p *Pool[K, C]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// Sweep retires every client past MaxAge, IdleTimeout or its NotAfter and
// returns how many. Do sweeps by itself every half of the shorter of
// MaxAge and IdleTimeout; call Sweep from a ticker when keys can go unused
// for long.
func (p *Pool[K, C]) Sweep() int {
	p.mu.Lock()
	closing := p.sweepLocked(p.clock.Now())
	p.mu.Unlock()
	_ = p.closeAll(closing) // counted in closes_total; a late close has no caller to tell
	return len(closing)
}

// Close retires every client and makes Do and Acquire return ErrClosed.
// Idle clients are closed before it returns (their close errors joined);
// clients in use are closed when their calls return, or when a call on
// them is abandoned; dials in flight are closed when they finish.
func (p *Pool[K, C]) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var closing []*entry[C]
	for k, e := range p.entries {
		if p.retireLocked(k, e, reasonClosing) {
			closing = append(closing, e)
		}
	}
	p.mu.Unlock()
	return p.closeAll(closing)
}

// acquire returns key's client with a reference taken, dialling it with
// dial (nil: Options.Dial) when there is none.
func (p *Pool[K, C]) acquire(ctx context.Context, key K, dial DialedFn[K, C]) (*entry[C], error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		// The clock is read only when time decides something: it is on
		// every call's path.
		var now time.Time
		var closing []*entry[C]
		if p.sweepEvery > 0 {
			now = p.clock.Now()
			if now.Sub(p.lastSweep) >= p.sweepEvery {
				closing = p.sweepLocked(now)
			}
		}
		if e, ok := p.entries[key]; ok {
			if now.IsZero() && !e.notAfter.IsZero() {
				now = p.clock.Now()
			}
			if reason := p.expired(e, now); reason != "" {
				if p.retireLocked(key, e, reason) {
					closing = append(closing, e)
				}
			} else {
				e.refs++
				e.lastUsed = now
				p.mu.Unlock()
				_ = p.closeAll(closing) // counted in closes_total; a late close has no caller to tell
				return e, nil
			}
		}
		f, ok := p.flights[key]
		if !ok {
			f = &flight[C]{done: make(chan struct{})}
			p.flights[key] = f
			if dial == nil {
				dial = p.dial
			}
			go p.runFlight(ctx, key, f, dial)
		}
		p.mu.Unlock()
		_ = p.closeAll(closing) // counted in closes_total; a late close has no caller to tell

		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("clientpool %s: waiting for dial of %v: %w", p.name, key, ctx.Err())
		}
		if f.err != nil {
			return nil, f.err
		}
		p.mu.Lock()
		if !f.e.retired {
			f.e.refs++
			f.e.lastUsed = p.clock.Now()
			p.mu.Unlock()
			return f.e, nil
		}
		// Evicted between the dial and this caller: go round and dial again.
		p.mu.Unlock()
	}
}

// runFlight dials once for every caller waiting on key, with the dial of
// the caller that started it. It runs detached from that caller (values
// kept, cancellation dropped) so that one caller giving up does not fail
// the others; DialTimeout bounds it.
func (p *Pool[K, C]) runFlight(ctx context.Context, key K, f *flight[C], dial DialedFn[K, C]) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.dialTimeout)
	defer cancel()
	var d Dialed[C]
	var err error
	if p.fence == nil {
		d, err = dial(dctx, key)
	} else if until := p.fence.Until(); !p.clock.Now().Before(until) {
		p.m.fenced.Inc()
		err = ErrFenced
	} else {
		fctx, stop := p.fenced(dctx, until)
		d, err = dial(fctx, key)
		if err != nil && errors.Is(context.Cause(fctx), ErrFenced) {
			p.m.fenced.Inc()
			err = fmt.Errorf("%w: %w", ErrFenced, err)
		}
		stop()
	}

	p.mu.Lock()
	delete(p.flights, key)
	now := p.clock.Now()
	switch {
	case errors.Is(err, ErrFenced):
		f.err = &DialError{Pool: p.name, Key: key, Err: err}
		p.mu.Unlock()
	case err != nil:
		p.m.dialErrors.Inc()
		f.err = &DialError{Pool: p.name, Key: key, Err: err}
		p.mu.Unlock()
	case p.closed:
		p.m.dialOKs.Inc()
		f.err = ErrClosed
		p.mu.Unlock()
		_ = p.closeClient(d.Client) // counted in closes_total; a late close has no caller to tell
	case !d.NotAfter.IsZero() && !now.Before(d.NotAfter):
		// Cached, it would be retired at its first use and dialled again
		// at once, round and round: the dial failed.
		p.m.dialErrors.Inc()
		f.err = &DialError{Pool: p.name, Key: key, Err: fmt.Errorf(msgExpiredAtDial, d.NotAfter, now)}
		p.mu.Unlock()
		_ = p.closeClient(d.Client) // counted in closes_total; a late close has no caller to tell
	default:
		p.m.dialOKs.Inc()
		f.e = &entry[C]{client: d.Client, born: now, notAfter: d.NotAfter, lastUsed: now}
		var replaced *entry[C]
		if old, ok := p.entries[key]; ok && p.retireLocked(key, old, reasonReplace) {
			// Flights are exclusive per key, so only a Put during the dial
			// gets here; the branch exists so that no path can overwrite a
			// client unclosed.
			replaced = old
		}
		p.entries[key] = f.e
		p.m.clients.Inc()
		p.mu.Unlock()
		if replaced != nil {
			_ = p.closeClient(replaced.client) // counted in closes_total; a late close has no caller to tell
		}
	}
	close(f.done)
}

// expired says why e must not be used at now, or "". now is zero when no
// expiry is set (the clock was not read).
func (p *Pool[K, C]) expired(e *entry[C], now time.Time) string {
	switch {
	case !e.notAfter.IsZero() && !now.Before(e.notAfter):
		return reasonNotAfter
	case p.maxAge > 0 && now.Sub(e.born) >= p.maxAge:
		return reasonMaxAge
	case p.idle > 0 && e.refs == 0 && now.Sub(e.lastUsed) >= p.idle:
		return reasonIdle
	}
	return ""
}

// sweepLocked retires expired entries and returns those to close now.
func (p *Pool[K, C]) sweepLocked(now time.Time) []*entry[C] {
	p.lastSweep = now
	var closing []*entry[C]
	for k, e := range p.entries {
		if reason := p.expired(e, now); reason != "" && p.retireLocked(k, e, reason) {
			closing = append(closing, e)
		}
	}
	return closing
}

// retire removes e if it is still key's client, closing it now if unused.
// It reports whether e was still current (a concurrent caller may already
// have replaced it; that caller's verdict stands).
func (p *Pool[K, C]) retire(key K, e *entry[C], reason string) bool {
	p.mu.Lock()
	if p.entries[key] != e {
		p.mu.Unlock()
		return false
	}
	closeNow := p.retireLocked(key, e, reason)
	p.mu.Unlock()
	if closeNow {
		_ = p.closeClient(e.client) // counted in closes_total; a late close has no caller to tell
	}
	return true
}

// retireLocked takes e out of the map and reports whether the caller must
// close it now (no call is using it; it is then marked closed). Otherwise
// the last release closes it, or an abandoned call's abandon.
func (p *Pool[K, C]) retireLocked(key K, e *entry[C], reason string) bool {
	if e.retired {
		return false
	}
	e.retired = true
	if p.entries[key] == e {
		delete(p.entries, key)
	}
	p.m.clients.Dec()
	p.m.evictions.WithLabelValues(p.name, reason).Inc()
	if e.refs > 0 || e.closed {
		return false
	}
	e.closed = true
	return true
}

// abandon is what an abandoned call does to its client: evict it when the
// policy says so (evict) and it is still key's client, and close it at
// once, although the abandoned call still holds it, whenever it is out of
// the pool: that call is hung in the client, and closing the client is
// what usually unblocks it. Other calls on the client, if any, fail. The
// close runs on its own goroutine: a client whose Close waits for its
// calls (a connection serialised by a mutex) must not hold the caller the
// bound has just freed.
func (p *Pool[K, C]) abandon(key K, e *entry[C], evict bool) {
	p.mu.Lock()
	closeNow := false
	if evict && p.entries[key] == e {
		// The abandoned call may have dropped its reference already (its
		// fn returned as the bound ran out): then retiring is what marks
		// the client closed, and the close is this path's to make.
		closeNow = p.retireLocked(key, e, string(errclass.Transport))
	}
	if e.retired && !e.closed {
		e.closed, closeNow = true, true
	}
	p.mu.Unlock()
	if closeNow {
		go func() { _ = p.closeClient(e.client) }() // counted in closes_total; a late close has no caller to tell
	}
}

// hold takes one more reference on e, which its holder already has: a
// Lease.Do's fn, which may outlive the lease.
func (p *Pool[K, C]) hold(e *entry[C]) {
	p.mu.Lock()
	e.refs++
	p.mu.Unlock()
}

func (p *Pool[K, C]) release(e *entry[C]) { p.releaseBy(e, time.Time{}) }

// releaseBy drops a reference on e and closes it when it was the last on
// a retired client. With by set (a bounded call's bound and grace), the
// close is waited for only until by, then goes on on its own goroutine,
// counted in closes_total when it ends; with by zero it runs here.
func (p *Pool[K, C]) releaseBy(e *entry[C], by time.Time) {
	p.mu.Lock()
	e.refs--
	closeNow := e.retired && e.refs == 0 && !e.closed
	if closeNow {
		e.closed = true
	}
	p.mu.Unlock()
	if !closeNow {
		return
	}
	if by.IsZero() {
		_ = p.closeClient(e.client) // counted in closes_total; a late close has no caller to tell
		return
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = p.closeClient(e.client) // counted in closes_total; a late close has no caller to tell
	}()
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
	}
}

func (p *Pool[K, C]) closeAll(es []*entry[C]) error {
	var errs []error
	for _, e := range es {
		if err := p.closeClient(e.client); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (p *Pool[K, C]) closeClient(c C) error {
	if p.closer == nil {
		return nil
	}
	if err := p.closer.Close(c); err != nil {
		p.m.closeErrors.Inc()
		return fmt.Errorf("clientpool %s: close: %w", p.name, err)
	}
	p.m.closeOKs.Inc()
	return nil
}
