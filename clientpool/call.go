package clientpool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/finale-dev/finale/errclass"
)

// Do runs fn with the client for key, dialling it if needed, then
// classifies fn's error with the context fn ran with and evicts the client
// when the policy says so. fn's error is returned unchanged; a dial error
// is a *DialError.
//
// With CallTimeout set, fn's context carries the pool's own bound, whose
// cause is errclass.ErrCallTimeout: when the bound fires the error is
// Transport (the client did not answer), and when the caller's context
// ends first (a shutdown, a cancellation) it is Canceled and never evicts.
// A caller whose deadline leaves no time for a bound gets an error
// wrapping context.DeadlineExceeded and fn is not called. fn then runs on
// a goroutine of its own, so that Do returns at the bound whatever fn does
// with its context: if fn has not returned a grace after the bound (a
// twentieth of the bound, at most a second), Do returns an error wrapping
// errclass.ErrCallTimeout and context.DeadlineExceeded (Transport), the
// call counts as abandoned, the policy applies to it as to any Transport
// error (DefaultPolicy evicts) and the client, once out of the pool, is
// closed at once, which usually ends the stuck call. fn keeps running until
// it returns; its result is dropped, and a panic in it is recovered and
// dropped. A panic in fn that is not abandoned is re-raised in Do's caller.
// Without CallTimeout fn runs on the caller's goroutine.
//
// With a Fence, Do refuses to start once the fence has passed, checking it
// before the dial and again right before fn, and ends fn's context at the
// fence (cause ErrFenced); an error of a call the fence ended wraps
// ErrFenced and fn's error, and never evicts.
//
// fn must not keep c after it returns. If Do may abandon fn, fn's writes
// to the caller's variables race with the caller once Do has returned an
// error: read what fn wrote only when Do returned nil.
func (p *Pool[K, C]) Do(ctx context.Context, key K, fn func(ctx context.Context, c C) error) error {
	return p.DoWith(ctx, key, nil, fn)
}

// DoWith is Do with the call's own dial: when key has no client, dial makes
// it (it is called with the pool's dial context, detached and bounded by
// DialTimeout, and the arguments its closure holds); when key has one,
// dial is not called. Callers arriving while a dial of key is in flight
// share that dial's client, whoever's dial it is: the key names the
// client, the dial only how to make it. A nil dial is Options.Dial.
func (p *Pool[K, C]) DoWith(ctx context.Context, key K, dial DialedFn[K, C], fn func(ctx context.Context, c C) error) error {
	var c call[K, C] // on the stack unless bounded: Do is on every call's path
	if err := p.begin(ctx, key, dial, &c); err != nil {
		return err
	}
	if c.deadline.IsZero() {
		defer c.finish() // even if fn panics, so a panicking call cannot pin a client
		return c.settle(fn(c.ctx, c.e.client))
	}
	bounded := new(call[K, C])
	*bounded = c // fn's goroutine may outlive this frame
	return bounded.runBounded(fn)
}

// Lease is a client lent to one caller until Release, for code that passes
// the client down through its own functions rather than running one fn.
// Release applies what Do applies to fn's error: classification, the
// eviction policy, the metrics, the fence. With CallTimeout, the lease is
// bounded like a call: its Context ends at the bound, and a lease still
// held a grace after it is abandoned by a guard, which counts it, applies
// the policy to a Transport error and closes the client (unblocking code
// stuck in it, when the client's Close interrupts its calls in flight).
// Code run through Lease.Do is bounded whatever the client does; code
// calling Client on the holder's goroutine is not (see the package's
// Bounds). Hold a lease for one call's worth of work: the pool cannot
// tell a lease held for other work from a client that does not answer.
//
// A Lease is used by one goroutine; its methods are safe on a nil Lease
// only for Release.
type Lease[K comparable, C any] struct {
	c        call[K, C]
	released atomic.Bool
	// gone is closed by the guard when it abandons the lease, which ends
	// a Do waiting for its fn; nil for unbounded leases.
	gone chan struct{}
}

// Acquire lends key's client, dialling it if needed:
//
//	lease, err := pool.Acquire(ctx, key)
//	if err != nil {
//		return err
//	}
//	defer lease.Release(&err) // err: the function's named result
//	return cleanup(lease.Context(), lease.Client(), obj)
//
// It fails as Do fails before calling fn (a *DialError, ErrFenced,
// ErrClosed, the caller's context).
func (p *Pool[K, C]) Acquire(ctx context.Context, key K) (*Lease[K, C], error) {
	return p.AcquireWith(ctx, key, nil)
}

// AcquireWith is Acquire with the call's own dial, as DoWith.
func (p *Pool[K, C]) AcquireWith(ctx context.Context, key K, dial DialedFn[K, C]) (*Lease[K, C], error) {
	l := &Lease[K, C]{}
	if err := p.begin(ctx, key, dial, &l.c); err != nil {
		return nil, err
	}
	if !l.c.deadline.IsZero() {
		l.gone = make(chan struct{})
		l.c.guard = time.AfterFunc(time.Until(l.c.deadline)+l.c.grace, func() {
			if l.c.abandon() {
				close(l.gone)
			}
		})
	}
	return l, nil
}

// Client is the leased client. Do not keep it after Release.
func (l *Lease[K, C]) Client() C { return l.c.e.client }

// Context is the context to call the client with: the caller's, ended at
// the pool's bound (cause errclass.ErrCallTimeout) and at the Fence (cause
// ErrFenced). Classification in Release reads it.
func (l *Lease[K, C]) Context() context.Context { return l.c.ctx }

// Do runs fn with the leased client, bounded as Pool.Do bounds a call:
// with CallTimeout, fn runs on a goroutine of its own and Do returns by
// the lease's bound and grace whatever fn and its client do. A fn still
// running then is abandoned with the lease (counted once, the policy
// applied to a Transport error, the client closed in the background): Do
// returns an error wrapping errclass.ErrCallTimeout and
// context.DeadlineExceeded, and Release reports the same. fn's context is
// ctx (usually the lease's Context or one derived from it) ended also
// when the lease's Context ends, with its cause. fn's error is returned
// unchanged; Release classifies what the holder returns, as for any code
// run under the lease. A panic in fn is re-raised in Do's caller, unless
// fn was abandoned. Without CallTimeout fn runs on the caller's goroutine.
//
// Do is how a lease holder stays bounded with a client whose Close waits
// for the call in flight (a connection serialised by a mutex): the guard
// can close a client, not interrupt code running on the holder's
// goroutine, so a call made with Client on that goroutine returns only
// when the client lets it (see the package's Bounds).
//
// Do does not call fn, and returns an error, once the lease was released
// (wrapping ErrClosed), abandoned (as above), or fenced (wrapping
// ErrFenced, counted when the lease is released).
func (l *Lease[K, C]) Do(ctx context.Context, fn func(ctx context.Context, c C) error) error {
	c := &l.c
	switch {
	case l.released.Load():
		return fmt.Errorf(msgLeaseReleased, c.p.name, c.key, ErrClosed)
	case atomic.LoadInt32(&c.state) == callAbandoned:
		return c.abandonedErr()
	case c.p.fence != nil && !c.p.clock.Now().Before(c.until):
		return fmt.Errorf(msgFenced, c.p.name, c.key, ErrFenced)
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(context.Canceled)
	stop := context.AfterFunc(c.ctx, func() { cancel(context.Cause(c.ctx)) })
	defer stop()
	if c.deadline.IsZero() {
		return fn(fctx, c.e.client)
	}
	// fn's own reference: the client is not closed as unused while fn may
	// still be in it, even after the holder has released the lease.
	c.p.hold(c.e)
	done := make(chan outcome, 1) // buffered: an abandoned fn never blocks on it
	go func() {
		var o outcome
		returned := false
		defer func() {
			if !returned {
				o.panicked = recover()
				o.exited = o.panicked == nil
			}
			// Released before the hand-off, so that when Do returns the
			// holder's Release is the last use and closes an evicted
			// client, as Do's own call does.
			c.p.release(c.e)
			done <- o
		}()
		o.err = fn(fctx, c.e.client)
		returned = true
	}()
	select {
	case o := <-done:
		return c.result(o)
	case <-l.gone:
		// The guard abandoned the lease at its bound and grace.
		return c.abandonedErr()
	}
}

// Release ends the lease with the outcome of its calls, *errp (nil errp or
// *errp means success), and may replace *errp as Do would have returned
// it: wrapped with ErrFenced when the fence ended the lease, or, when the
// guard abandoned the lease, an error wrapping errclass.ErrCallTimeout and
// context.DeadlineExceeded (Transport, whatever the holder returned, nil
// included: the pool has already counted and evicted it as such). Only
// the first Release counts; a nil Lease's Release does nothing.
func (l *Lease[K, C]) Release(errp *error) {
	if l == nil || !l.released.CompareAndSwap(false, true) {
		return
	}
	var err error
	if errp != nil {
		err = *errp
	}
	err, _ = l.c.end(err)
	if errp != nil {
		*errp = err
	}
}

// Call states: running until ended by its result, or abandoned at its
// bound. Exactly one transition happens; it decides who classifies.
const (
	callRunning int32 = iota
	callEnded
	callAbandoned
)

// Grace after the bound before a call is abandoned: a twentieth of the
// bound, at most maxGrace. A call that honours its context returns within
// it; a twentieth keeps a bound of nine tenths of the caller's time (see
// callDeadline) clear of the caller's deadline.
const (
	graceDen = 20
	maxGrace = time.Second
)

// Messages of abandoned calls.
const (
	msgAbandoned      = "clientpool %s: %v: the call did not return within its bound of %v and %v more, and was abandoned: %w: %w"
	msgLeaseAbandoned = "clientpool %s: %v: the lease was held past its bound of %v and %v more, and was abandoned: %w: %w (the holder then returned: %s)"
	msgNoTime         = "clientpool %s: %v: the caller's deadline leaves no time for the call: %w"
	msgLeaseReleased  = "clientpool %s: %v: Lease.Do after Release: %w"
	msgFenced         = "clientpool %s: %v: %w"
	msgFencedLate     = "clientpool %s: %v: the call returned at or after the fence, so what it wrote may have landed when another replica could lead: %w"
)

// call is one use of a client: by Do's fn or by a Lease.
type call[K comparable, C any] struct {
	p   *Pool[K, C]
	key K
	e   *entry[C]
	// ctx is what the call runs with; the cancel functions end its timers.
	ctx                    context.Context
	cancelBound, stopFence context.CancelFunc
	// deadline is the pool's bound on the real clock (zero: unbounded),
	// bound its length, grace how long after it the call may still return.
	deadline     time.Time
	bound, grace time.Duration
	// until is the fence the call started under, on the pool's clock (zero
	// without a Fence): its context ends there, and a call that ends at or
	// after it is reported as fenced.
	until time.Time
	// guard abandons a lease at deadline + grace; nil for Do and unbounded
	// leases.
	guard *time.Timer
	// state is callRunning, callEnded or callAbandoned, changed only by
	// atomic compare-and-swap (a plain int32 so that a call can be copied
	// before it is shared).
	state int32
}

// begin starts a call of key into c: the fence, the client, the fence again,
// the bound. On error nothing is held.
func (p *Pool[K, C]) begin(ctx context.Context, key K, dial DialedFn[K, C], c *call[K, C]) error {
	if p.fence != nil {
		if until := p.fence.Until(); !p.clock.Now().Before(until) {
			p.m.fenced.Inc()
			return fmt.Errorf(msgFenced, p.name, key, ErrFenced)
		}
	}
	e, err := p.acquire(ctx, key, dial)
	if err != nil {
		return err
	}
	var until time.Time
	if p.fence != nil {
		// Again, right before the call: acquiring may have waited for a
		// dial, up to DialTimeout, and the fence may have passed meanwhile
		// (or moved on with a renewal).
		if until = p.fence.Until(); !p.clock.Now().Before(until) {
			p.release(e)
			p.m.fenced.Inc()
			return fmt.Errorf(msgFenced, p.name, key, ErrFenced)
		}
	}
	c.p, c.key, c.e, c.ctx, c.until = p, key, e, ctx, until
	if p.callTimeout > 0 {
		callerDeadline, hasDeadline := ctx.Deadline()
		// Real time, not the pool's clock: the bound is a context timer,
		// which runs on real time, and it is compared with the caller's
		// deadline, which is real time too.
		now := time.Now()
		d, ok := callDeadline(now, p.callTimeout, callerDeadline, hasDeadline)
		if !ok {
			// Started, a client that ignores its context would hold the
			// caller with no bound at all.
			p.release(e)
			p.m.call(errclass.Canceled)
			return fmt.Errorf(msgNoTime, p.name, key, context.DeadlineExceeded)
		}
		c.ctx, c.cancelBound = context.WithDeadlineCause(ctx, d, errclass.ErrCallTimeout)
		c.deadline, c.bound = d, d.Sub(now)
		c.grace = min(c.bound/graceDen, maxGrace)
	}
	if p.fence != nil {
		// Outside the call's own bound, so that the bound is computed
		// from the caller's time, not the fence's: a fence that ends a
		// call is this replica stepping back (never evicts), while a
		// bound fitted under it would read as a hung client.
		c.ctx, c.stopFence = p.fenced(c.ctx, until)
	}
	return nil
}

// outcome is what a bounded fn did.
type outcome struct {
	err       error
	panicked  any  // recover()'s value
	exited    bool // runtime.Goexit (t.FailNow in a test's fn)
	abandoned bool
}

// runBounded runs fn on its own goroutine and waits for it until the bound
// and grace.
func (c *call[K, C]) runBounded(fn func(ctx context.Context, c C) error) error {
	done := make(chan outcome, 1) // buffered: an abandoned fn never blocks on it
	go c.run(fn, done)
	select {
	case o := <-done:
		return c.result(o)
	case <-c.ctx.Done():
	}
	// The context has ended: at the bound, or before it by the caller or
	// the fence. A client that honours it returns now; one that does not
	// has until the bound and the grace. The timer is made only here, so
	// that a call that returns in time costs none.
	t := time.NewTimer(time.Until(c.deadline) + c.grace)
	defer t.Stop()
	select {
	case o := <-done:
		return c.result(o)
	case <-t.C:
	}
	if c.abandon() {
		return c.abandonedErr()
	}
	return c.result(<-done) // fn returned as the timer fired, and ended the call first
}

// run calls fn and ends the call with its result, however fn leaves.
func (c *call[K, C]) run(fn func(ctx context.Context, c C) error, done chan<- outcome) {
	var o outcome
	returned := false
	defer func() {
		if returned {
			o.err, o.abandoned = c.end(o.err)
		} else {
			o.panicked = recover()
			o.exited = o.panicked == nil
			o.abandoned = !atomic.CompareAndSwapInt32(&c.state, callRunning, callEnded)
			c.finish()
		}
		done <- o
	}()
	o.err = fn(c.ctx, c.e.client)
	returned = true
}

// result is what Do returns, or does, for o: as if fn had run on the
// caller's goroutine, unless the call was abandoned.
func (c *call[K, C]) result(o outcome) error {
	switch {
	case o.abandoned:
		return c.abandonedErr()
	case o.exited:
		runtime.Goexit()
	case o.panicked != nil:
		panic(o.panicked)
	}
	return o.err
}

// end ends the call with its result: it classifies and applies the policy
// (settle) unless the call was abandoned, in which case the result is
// dropped. It reports the error to return and whether it was abandoned.
func (c *call[K, C]) end(err error) (error, bool) {
	if !atomic.CompareAndSwapInt32(&c.state, callRunning, callEnded) {
		c.finish()
		return c.leaseAbandonedErr(err), true
	}
	if c.guard != nil {
		c.guard.Stop()
	}
	err = c.settle(err)
	c.finish()
	return err, false
}

// settle classifies a finished call's error with the call's context and
// applies the policy.
//
// With a Fence, a call that ends at or after its fence is fenced: an error
// wraps ErrFenced when the fence ended the context (not when the bound or
// the caller ended it first: then the class stands, a hung client is
// evicted), and a success is never reported as one: a
// body that ignored its context, or answered after its bound had fired
// before the fence, may have written after another replica could lead,
// and only the fence knows. Both count in finale_clientpool_fenced_total
// and never evict. The clock is read when the call ends, so a success
// whose answer came just before the fence and whose end is seen just
// after it is reported as fenced too: the doubt is reported, not hidden.
func (c *call[K, C]) settle(err error) error {
	p := c.p
	if p.fence != nil {
		// Err reads the clock (fenceContext), so the cause is ErrFenced
		// once the fence has passed, even before its real-time timer fires,
		// unless the bound or the caller ended the context first.
		_ = c.ctx.Err()
		byFence := errors.Is(context.Cause(c.ctx), ErrFenced)
		switch {
		case err == nil && (byFence || !p.clock.Now().Before(c.until)):
			p.m.fenced.Inc()
			return fmt.Errorf(msgFencedLate, p.name, c.key, ErrFenced)
		case err != nil && byFence:
			p.m.fenced.Inc()
			return fmt.Errorf("clientpool %s: %v: %w: %w", p.name, c.key, ErrFenced, err)
		case errors.Is(err, ErrFenced):
			// Lease.Do refused past the fence after the bound had ended
			// the context: fenced, not a verdict on the client.
			p.m.fenced.Inc()
			return err
		}
	}
	if err == nil {
		p.m.callsOK.Inc()
		return nil
	}
	class := p.classifier.Classify(c.ctx, err)
	p.m.call(class)
	if p.policy.Evict(class, err) {
		p.retire(c.key, c.e, string(class))
	}
	return err
}

// abandon gives up on a call still running a grace after its bound, unless
// it has ended: counted as abandoned and as a Transport call, the policy
// applied, the client closed once out of the pool. The call's reference
// stays until it returns. It reports whether it abandoned the call.
//
// Transport whatever ended the context first (the caller, the fence): a
// call that has not returned at its own bound is hung in its client.
func (c *call[K, C]) abandon() bool {
	if !atomic.CompareAndSwapInt32(&c.state, callRunning, callAbandoned) {
		return false
	}
	p := c.p
	p.m.abandoned.Inc()
	p.m.call(errclass.Transport)
	p.abandon(c.key, c.e, p.policy.Evict(errclass.Transport, c.abandonedErr()))
	return true
}

// finish drops the call's reference and stops its timers. A close it
// makes (the call was the last on an evicted client) is waited for only
// until the call's bound and grace, so that a Close that waits for the
// network cannot hold Do's caller or a Release past the bound.
func (c *call[K, C]) finish() {
	c.p.releaseBy(c.e, c.deadline.Add(c.grace))
	if c.stopFence != nil {
		c.stopFence()
	}
	if c.cancelBound != nil {
		c.cancelBound()
	}
}

func (c *call[K, C]) abandonedErr() error {
	return fmt.Errorf(msgAbandoned, c.p.name, c.key, c.bound, c.grace, errclass.ErrCallTimeout, context.DeadlineExceeded)
}

// leaseAbandonedErr is Release's error for an abandoned lease. The
// holder's error is quoted, not wrapped: it is often what closing the
// client made (a Canceled status, a closed connection), and would
// classify otherwise than the abandonment the pool counted.
func (c *call[K, C]) leaseAbandonedErr(holder error) error {
	said := "no error"
	if holder != nil {
		said = holder.Error()
	}
	return fmt.Errorf(msgLeaseAbandoned, c.p.name, c.key, c.bound, c.grace, errclass.ErrCallTimeout, context.DeadlineExceeded, said)
}
