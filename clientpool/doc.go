// Package clientpool caches clients to external services by connection
// identity and is the one call site through which they are used, so that a
// broken client is dropped wherever it fails, not only where someone
// remembered to check.
//
// # Guarantees
//
//   - One client per key K, dialled once however many callers want it at
//     the same time (a per-key single flight). A failed dial is returned to
//     everyone waiting on it and is not cached: the next Do dials again.
//   - Do(ctx, key, fn) runs fn with the client, classifies fn's error with
//     errclass (using the context fn ran with, so shutdown reads as
//     Canceled), and applies the pool's eviction Policy. The policy is one value held by the
//     pool: DefaultPolicy evicts on Transport and Auth, never on NotFound,
//     Conflict, Invalid, Throttled or Canceled. NeverEvict reproduces the
//     upstream pool of the seed incident.
//   - A client leaves the pool (eviction, Evict, MaxAge, IdleTimeout, Close)
//     exactly once and is closed exactly once, when the last call still
//     using it returns (reference counting). Nothing overwrites a client
//     without closing it.
//   - CallTimeout bounds each call; when the bound fires, the error is
//     Transport and the client is evicted. The bound fires before the
//     caller's own deadline whatever the two durations: when the caller's
//     deadline (controller-runtime's ReconciliationTimeout, the last pass of
//     a hold) is nearer than CallTimeout, the bound is nine tenths of the
//     caller's remaining time. The bound's context has cause
//     errclass.ErrCallTimeout, which is how the classification tells "the
//     pool's bound fired" (Transport, evict) from "the caller ended the
//     call" (a shutdown, a cancellation, the caller's deadline: Canceled,
//     never evict). Without CallTimeout, a silent connection (the seed's
//     "context deadline exceeded" 238 times) is only ever seen through the
//     caller's deadline, which classifies as Canceled: it is never evicted.
//   - MaxAge and IdleTimeout, when set, retire clients by an injected
//     k8s.io/utils/clock PassiveClock, checked at use and by Sweep.
//   - With a Fence (a leader-elected replica's lease, fence.Lock), no call
//     or dial starts once the fence has passed, and every call's and dial's
//     context ends at the fence (cause ErrFenced), so nothing is sent past
//     the point where another replica may lead. Such errors wrap ErrFenced
//     and never evict (the client is not at fault; ClassifyFenced makes
//     them Canceled). The context reads the clock whenever it is checked,
//     not only when its timer fires, so a process that wakes from a pause
//     past its fence sees it passed before its next request. What the
//     fence cannot stop is a request whose check came before the pause and
//     whose write came after: a window of the few instructions between a
//     client's context check and its socket write.
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
// The shared dial runs detached from the caller that started it (its values
// kept, its cancellation dropped, bounded by DialTimeout), so one caller
// giving up does not fail the others waiting for the same key. fn's error
// is returned unchanged, so errors.Is and errors.As work for callers; dial
// errors are wrapped with the pool name and key, which is why keys must not
// hold secrets. Metrics (finale_clientpool_clients, _dials_total by result,
// _evictions_total by reason, _calls_total by class, _closes_total by
// result, _fenced_total) are labelled by pool name so several pools coexist; their series
// are resolved once per pool because label lookups would otherwise cost
// more than the rest of Do.
//
// # Threat model
//
// A pool trusts its Dial and Close functions and the keys it is given. It
// holds no credentials itself. A client that answers but lies is not its
// concern; a client that does not answer, or whose credentials are
// rejected, is.
package clientpool
