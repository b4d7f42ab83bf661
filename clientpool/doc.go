// Package clientpool caches clients to external services by connection
// identity and is the one call site through which they are used, so that a
// broken client is dropped wherever it fails, not only where someone
// remembered to check.
//
// Use it by building one Pool per kind of client and making every call to
// the service through it, with Do or, for code that passes the client
// down, a Lease released with one defer:
//
//	pool, err := clientpool.New(clientpool.Options[string, *sdk.Client]{
//		Dial:        clientpool.DialFn[string, *sdk.Client](dial),
//		CallTimeout: 30 * time.Second,
//	})
//	err = pool.Do(ctx, key, func(ctx context.Context, c *sdk.Client) error {
//		return c.Delete(ctx, id)
//	})
//
//	lease, err := pool.Acquire(ctx, key)
//	if err != nil {
//		return err
//	}
//	defer lease.Release(&err) // classifies err and evicts a broken client
//	return deleteAll(lease.Context(), lease.Client())
//
// # Guarantees
//
//   - One client per key K, dialled once however many callers want it at
//     the same time (a per-key single flight). A failed dial is returned to
//     everyone waiting on it as a *DialError and is not cached: the next
//     call dials again.
//   - Do(ctx, key, fn) runs fn with the client, classifies fn's error with
//     errclass (using the context fn ran with, so shutdown reads as
//     Canceled), and applies the pool's eviction Policy. The policy is one
//     value held by the pool: DefaultPolicy evicts on Transport, Auth and Identity,
//     never on NotFound, Conflict, Invalid, Throttled or Canceled.
//     NeverEvict reproduces the upstream pool of the seed incident.
//   - A Lease (Acquire) lends the client to code that passes it down
//     through its own functions; Release(&err) applies exactly what Do
//     applies to fn's error: the same classification, policy, metrics and
//     fence. Lease.Do runs one piece of that code bounded as Do runs fn
//     (see Bounds). Do and leases mix freely on one pool.
//   - A client leaves the pool (eviction, Evict, MaxAge, IdleTimeout, its
//     NotAfter, Put over it, Close) exactly once, is never handed out
//     after that, and is closed exactly once: when the last call still
//     using it returns, or at once when a call on it is abandoned (below).
//     Nothing overwrites a client without closing it.
//   - CallTimeout bounds each call, whatever the client does with its
//     context. When the bound fires, the error is Transport and the client
//     is evicted. The bound fires before the caller's own deadline
//     whatever the two durations: when the caller's deadline
//     (controller-runtime's ReconciliationTimeout, the last pass of a hold)
//     is nearer than CallTimeout, the bound is nine tenths of the caller's
//     remaining time. The bound's context has cause errclass.ErrCallTimeout,
//     which is how the classification tells "the pool's bound fired"
//     (Transport, evict) from "the caller ended the call" (a shutdown, a
//     cancellation, the caller's deadline: Canceled, never evict). A call
//     still running a grace after its bound (a twentieth of the bound, at
//     most a second) is abandoned: Do returns a Transport error wrapping
//     errclass.ErrCallTimeout, a Lease's guard acts on its own; the policy
//     applies as to any Transport error, the client once out of the pool is
//     closed at once (which is what usually ends the stuck call), and
//     finale_clientpool_abandoned_total counts it. Without CallTimeout, a
//     silent connection (the seed's "context deadline exceeded" 238 times)
//     is only ever seen through the caller's deadline, which classifies as
//     Canceled: it is never evicted, and Do waits for fn.
//   - MaxAge, IdleTimeout and a client's own NotAfter (returned by its dial
//     in Dialed: an mTLS certificate's expiry) retire clients by an
//     injected k8s.io/utils/clock PassiveClock, checked at use and by
//     Sweep: no call starts on a client at or past its NotAfter.
//   - With a Fence (a leader-elected replica's lease, fence.Lock), no call
//     or dial starts once the fence has passed, and every call's and dial's
//     context ends at the fence (cause ErrFenced), so nothing is sent past
//     the point where another replica may lead. The fence is checked before
//     a dial and again once the client is there, right before the call (or
//     the lease is handed out): the dial may have taken up to DialTimeout.
//     Such errors wrap ErrFenced and never evict (the client is not at
//     fault; ClassifyFenced makes them Canceled). The context reads the
//     clock whenever it is checked, not only when its timer fires, so a
//     process that wakes from a pause past its fence sees it passed before
//     its next request. What the fence cannot stop is a request whose
//     check came before the pause and whose write came after: a window of
//     the few instructions between a client's context check and its socket
//     write; nor a request by a client that ignores its context, until its
//     bound abandons it and closes the client. What it does is never
//     report such a request as a success: a call (Do's fn, a lease) that
//     ends at or after its fence, read on the pool's clock when it ends,
//     returns an error wrapping ErrFenced even when fn or the holder
//     returned nil, counted in finale_clientpool_fenced_total, never
//     evicting. Its writes may have landed: the caller
//     keeps what it would keep on a failure, and the replica that leads
//     next observes and finishes.
//
// # Bounds
//
// With CallTimeout, these return by the call's bound and grace (at most
// CallTimeout and a second more, less under a nearer caller deadline)
// whatever the client does, ignoring its context and a Close that waits
// for the call in flight or for the network included:
//
//   - Do and DoWith, once they have the client (a dial is bounded by
//     DialTimeout and, for each waiting caller, by its own context);
//   - Lease.Do, and so a lease holder whose code calls the client only
//     inside Lease.Do, and its Release;
//   - Release of a lease the guard has abandoned: it neither waits for
//     the call stuck in the client nor for the client's Close, which runs
//     on a goroutine of its own.
//
// When the call was the last use of a client its error evicted, Do and
// Release close the client, and wait for that Close only until the
// bound and grace; a slower Close goes on on its own goroutine, counted
// in finale_clientpool_closes_total when it ends
// (TestCloseOfTheLastCallIsBounded).
//
// Not bounded by the pool:
//
//   - Code that calls the leased client (Client) on the holder's own
//     goroutine. The guard abandons the lease at its bound and grace
//     (counted, the policy applied, the client closed in the background),
//     but it cannot interrupt that goroutine: the holder is freed only if
//     the client returns when its context ends or when it is closed. A
//     client whose Close waits for the call in flight (a connection
//     serialised by a mutex, as examples/postgres's Conn; some SDKs'
//     graceful close) holds the holder until the network heals or the
//     kernel gives up on the connection (TestLeaseHolderCallIsNotBounded).
//     Run such calls in Lease.Do (TestLeaseDoBoundsTheHolder).
//   - fn or a Lease.Do body once abandoned: it runs on until its client
//     lets it return (see Decisions).
//   - The Close of an unused client, which runs on the goroutine that
//     retired it: Evict, Put, Sweep, Pool.Close, and a call that finds
//     its client expired (before its bound starts). Close must not wait
//     for the network longer than such a caller can afford
//     (examples/postgres bounds its terminate message by 5 s).
//   - Without CallTimeout, nothing: Do waits for fn.
//
// # Existing code: the lease
//
// A controller that gets a client from its own cache and passes it down
// through several functions adopts the pool where it got the client, and
// nowhere else:
//
//	func (r *Reconciler) cleanup(ctx context.Context, obj *v1.Worker) (err error) {
//		lease, err := r.pool.Acquire(ctx, keyOf(obj))
//		if err != nil {
//			return err
//		}
//		defer lease.Release(&err)
//		return deleteDeployment(lease.Context(), lease.Client(), obj.Name)
//	}
//
// err must be the function's named result, so that the deferred Release
// sees the outcome and can replace it (ErrFenced, an abandoned lease).
// When the client's Close may wait for a call in flight, the calls go
// through Lease.Do, which keeps the holder bounded (see Bounds):
//
//	return lease.Do(lease.Context(), func(ctx context.Context, c *sdk.Client) error {
//		return deleteDeployment(ctx, c, obj.Name)
//	})
//
// Helpers keep their signatures; they must not keep the client after
// Release. Dial arguments the caller has at hand (a Secret it has just
// read) go to AcquireWith or DoWith as a DialedFn closure, not as context
// values. Tests seed a client with Put; a client whose Close returns
// nothing takes CloseFunc.
//
// # Credentials per call
//
// The key names the credential (a Secret's namespace and name, an auth
// mode), never its value. The dial installs a credentials callback that
// reads the Secret on every call (for gRPC a credentials.PerRPCCredentials;
// for HTTP a RoundTripper; for PostgreSQL a BeforeConnect hook), so a
// rotated Secret is used by the next call without a redial, and a rejected
// credential surfaces as Auth and evicts. See Example_perCallCredentials.
//
// # Decisions
//
// The bound under a near caller deadline is a share of the caller's time,
// not CallTimeout: had the caller's deadline fired first, the pool could
// not know whether the client hung or the caller gave up, and a client
// that does not close itself (gRPC, HTTP SDKs) would stay cached for ever
// under any caller whose deadline is shorter than CallTimeout. The price is
// that a call slower than nine tenths of its caller's remaining time
// evicts a client that may be healthy; that call failed in any case.
//
// Do runs fn on a goroutine of its own when it has a bound, because that
// is the only way to free the caller from a client that ignores its
// context: closing the client alone (what a Lease's guard can do, as code
// blocked in the client runs on the caller's goroutine) frees it only
// when the client's Close interrupts calls in flight, and a client whose
// Close waits for its calls (a connection serialised by a mutex) would
// hold the caller for ever. The goroutine and the hand-off cost 2 to
// 3 µs a call (BenchmarkDo), against a loopback gRPC call of about 100 µs;
// without CallTimeout fn runs inline, as before. The grace after the
// bound lets a client that does honour its context return its own error
// (and keep Do's "fn's error unchanged"); a twentieth keeps a bound of
// nine tenths of the caller's time clear of the caller's deadline.
//
// An abandoned call is safe to leave running because it can do nothing a
// Transport error does not already allow for: a call that timed out may
// have been executed by the server in any case, so callers already retry
// idempotently (the ledger writes its record before a create, deletes
// accept NotFound). Its client is out of the pool (by DefaultPolicy) and
// closed, so no later call shares it, and its result is dropped: nothing
// is classified twice or reported to a caller who has moved on. A panic in
// it is recovered and dropped, since it is most likely the close the pool
// made under it. What it costs: its goroutine, and its client's memory,
// until the stuck call returns (for ever, if even a closed client does
// not return); other calls in flight on the closed client fail with it;
// it may still write to the service after Do returned, and past a fence;
// and fn's writes to the caller's variables race with the caller, so a
// caller reads what fn wrote only when Do returned nil. A lease held past
// its bound is abandoned the same way, so a lease must be held for one
// call's worth of work: the pool cannot tell a lease held for other work
// from a client that does not answer. The guard frees a holder blocked in
// the client only by closing it; Lease.Do frees it whatever the client
// does, as Do does, at the cost of a goroutine per call. After its guard has acted, Release
// reports the abandonment (Transport), whatever the holder returned, so
// that the caller sees what the pool counted.
//
// With CallTimeout, a caller whose deadline leaves no time for a bound
// (under ten nanoseconds) gets context.DeadlineExceeded and fn is not
// called: started, a client that ignores its context would hold it with
// no bound at all.
//
// The shared dial runs detached from the caller that started it (its values
// kept, its cancellation dropped, bounded by DialTimeout), so one caller
// giving up does not fail the others waiting for the same key. fn's error
// is returned unchanged, so errors.Is and errors.As work for callers; dial
// errors are *DialError, which names the pool and key in its message
// (which is why keys must not hold secrets) and unwraps to the dial's
// error. A caller's own dial (DoWith, AcquireWith) is a closure rather
// than an argument of a type the pool would carry: the arguments stay
// typed and the Dialer interface unchanged. Callers arriving during a dial
// share its client whoever's dial it is: the key names the client, the
// dial says only how to make it. A dial whose client has expired already
// fails, or each use would dial again. Metrics (finale_clientpool_clients,
// _dials_total by result, _evictions_total by reason (an error class, or
// MaxAge, IdleTimeout, NotAfter, Evict, Replaced, PoolClosed), _calls_total by
// class, _closes_total by result, _fenced_total, _abandoned_total) are
// labelled by pool name so several pools coexist; their series are
// resolved once per pool because label lookups would otherwise cost more
// than the rest of Do.
//
// # What adoption added
//
// Five package-level names and four methods of Pool, each for one thing
// existing code could not do: Lease (Client, Context, Release) and
// Acquire, for code that passes a client down; AcquireWith and DoWith with
// DialedFn (a dial that is also a Dialer, its Dial dropping the expiry),
// for dial arguments from the caller; Dialed (Client, NotAfter) for a
// client's own expiry (evicted with reason NotAfter); DialError
// (Pool, Key, Err; Error, Unwrap), so callers tell a failed dial with
// errors.As; Put, to seed a client in tests or hand one over; CloseFunc
// (Close) for a close that returns nothing. Twenty-two exported
// identifiers counting methods and fields; none existing changed. Lease.Do
// came later, for a holder that must stay bounded with a client whose
// Close waits for the call in flight.
//
// # Threat model
//
// A pool trusts its Dial and Close functions and the keys it is given. It
// holds no credentials itself. A client that answers but lies is not its
// concern; a client that does not answer, or whose credentials are
// rejected, is.
package clientpool
