// Package faultinject scripts the faults that deletion paths must survive:
// the external service misbehaving (Proxy), the apiserver answering badly or
// the process crashing right after a write (Script and WrapClient), a
// controller's view going stale (EventFault), and one controller's workers
// stalling while the rest run (Gate). Time faults need nothing here: every
// decision in finale takes a k8s.io/utils/clock, and tests pass a
// clock/testing.FakeClock and Step it.
//
// Use it in a test: put a Proxy between the operator and its service and
// freeze or reset it, or wrap the operator's client in a Script of faults:
//
//	p, err := faultinject.NewProxy(serviceAddr) // dial p.Addr() instead
//	p.Freeze()                                 // connections hang, as in the seed incident
//
//	s := faultinject.NewScript(faultinject.Fault{Verb: faultinject.Create, Kind: "ConfigMap", Nth: 1, Crash: true})
//	c := faultinject.WrapClient(mgr.GetClient(), s)
//
// # Client faults
//
// WrapClient wraps a controller-runtime client in the manner of
// client/interceptor (it is built on it): each call is matched against the
// Script's Faults by verb, kind and ordinal. A Fault can fail the Nth call
// (the call does not land), add latency, or let the call land and then
// "crash": the Script's OnCrash runs (a harness cancels the manager, dropping
// its caches and client pools) and every later call fails with ErrCrashed
// until Recover. Scripts also record every call, which is how the campaigns
// enumerate the writes a lifecycle makes and how benchmarks count API writes.
//
// # Stale and unobserved states
//
// EventFault wraps a controller's event handler: it delays events before
// they reach the work queue, or drops those for chosen objects, so an
// intermediate state is never seen (Sieve's "unobserved state").
//
// # Workers
//
// Gate wraps a reconciler and pauses it: reconciles wait at the gate (they
// neither fail nor back off) until Resume. The G3 seed is exactly an owner
// whose workers lag while the children's release path goes on.
//
// # Proxy
//
// Proxy is a real TCP proxy on 127.0.0.1 that sits between a client and its
// server (gRPC, PostgreSQL, anything over TCP) and can, at any moment:
//
//   - Freeze: established connections stop forwarding bytes in both
//     directions but stay open, while new connections are accepted and work.
//     This is the seed incident's half-broken client: a cached connection
//     that swallows every request and answers nothing, next to a server that
//     is perfectly reachable by a fresh dial. Only a client that is dropped
//     and redialled recovers; Thaw undoes it.
//   - Stall (NewHTTP2Proxy only): established HTTP/2 connections look alive
//     and answer nothing. The proxy acknowledges the client's PINGs and
//     SETTINGS itself and forwards nothing else, so the client's keepalive
//     is satisfied and every call times out, while new connections are
//     served. Freeze is not enough to mirror the seed: measured with the
//     real Temporal SDK and server, a frozen connection stops answering
//     keepalive PINGs and the SDK closes it and redials by itself (about
//     45 s with its defaults, 30 s plus a 15 s timeout), so a cached client
//     heals without any eviction; the seed's stayed broken for 39 minutes,
//     as behind an HTTP/2-terminating middlebox whose backend hangs. A
//     stalled connection cannot be thawed (the swallowed frames leave the
//     two ends' HPACK state apart); it only closes.
//   - ResetAll: abort established connections with a TCP RST.
//   - Refuse: reset new connections as soon as they are accepted.
//   - SetLatency: delay every chunk, both directions.
//
// Accepted, Refused and Active count connections, so a test can prove that
// a recovery really went through a new connection; PingsAnswered counts the
// keepalive PINGs a stall fooled.
//
// # LagProxy
//
// LagProxy is the link for stale views from a real server: everything its
// target sends reaches the client a set time after it arrived (a pipeline,
// not one chunk after another, so a busy connection is exactly that far
// behind and no further), Partition cuts it both ways and refuses new
// connections, and Retarget fails new connections over to another target
// and resets the established ones. controlplane puts one between each
// extra kube-apiserver and etcd (its watch cache lags) and one in front of
// apiservers (a load balancer that fails over).
//
// # Decisions
//
// The proxy is written here rather than taken from toxiproxy's Go packages.
// A toxiproxy toxic (timeout, latency, reset_peer, bandwidth 0) is attached
// to a proxy and applies to every connection through it, new ones included;
// "freeze what is established, accept and serve what is new" is not
// expressible, and that asymmetry is exactly the fault under test. The
// state it needs is small: a freeze gate per connection, snapshotted at
// Freeze time.
//
// Frozen connections keep reading from their source until one chunk is held
// (so the client's writes succeed, as against a silent peer), and forward
// nothing until Thaw. Close closes every connection and waits for all the
// proxy's goroutines, so tests that Close leak none.
//
// # Threat model
//
// Test harness only: it listens on loopback, trusts its target, and has no
// authentication. Do not expose it.
package faultinject
