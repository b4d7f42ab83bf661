// Package controller (brownfield/adopted) is brownfield/naive after
// adopting finale's clientpool, with the smallest change that could do it:
// the reconciler holds a clientpool.Pool instead of its own cache, and the
// two places that took a client from the cache take a lease instead,
// released by one defer with the function's error. The functions the
// client is passed down to are unchanged, and so is the dial.
//
// What the lease brings: every call is bounded (CallTimeout, the SDK's own
// default of 10 s), and Release classifies the outcome with errclass, which
// reads the SDK's serviceerror types through Status(); a call that timed
// out (Transport) or was refused (Auth) evicts the client on any path, the
// deletion path included, and the next attempt dials afresh. No classifier
// of its own is needed.
//
// The main path holds its lease to the end of Reconcile, status write
// included: a lease is bounded like one call, so the work it covers must
// fit in CallTimeout (here a describe, perhaps a create and a claim, and a
// status write).
//
// brownfield/adoption.diff is the whole change; a test there keeps it
// equal to the two packages' difference and bounds its size.
package controller
