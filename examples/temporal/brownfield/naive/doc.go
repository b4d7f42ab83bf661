// Package controller (brownfield/naive) is a WorkerDeployment controller
// written the usual way, as temporal-worker-controller v1.7 is: its own
// Reconcile, its own cache of Temporal SDK clients keyed by connection
// (ClientPool), a client taken from the cache and passed down through
// several functions, and a finalizer whose cleanup calls the real SDK.
//
// The cache keeps a client until a call on the main reconcile path is
// refused with PermissionDenied or Unauthenticated; the deletion path never
// evicts. A client whose connection stops answering while the SDK's
// keepalive still sees it alive (the G1 seed) is kept for ever, and the
// deletion is retried on it every RequeueAfter until the process restarts.
//
// It is the "before" of examples/temporal/brownfield: brownfield/adopted is
// the same controller after adopting finale's clientpool lease, and the
// difference between the two is the adoption (brownfield/adoption.diff).
// Do not use it.
package controller
