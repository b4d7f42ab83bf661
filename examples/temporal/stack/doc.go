// Package stack runs the G1 seed's own stack for the Temporal example's
// tests, its benchmark and `finale-lab scenario temporal-poisoned-client`: the
// operator (either build) in this process against a real control plane
// and a real Temporal server, with an HTTP/2-aware fault proxy
// (faultinject.NewHTTP2Proxy) between the operator and the server, and the
// verbs the seed's steps are made of.
//
// The operator reaches the server only through the proxy; Stack.Temporal,
// the harness's own client, reaches it directly, so that arranging the
// server (a worker that registers a version) and checking it (is the
// deployment gone?) never depend on the fault under test.
//
// Time: the operator's clock is a fake one the harness steps, which is how
// ten minutes of retries are stood for by a few real ones (the watchdog
// measures a deletion's age with it). The call timeout and the retry
// interval are real: they are what the real attempts take.
package stack
