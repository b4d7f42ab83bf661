// Package fence tells a replica elected through a Kubernetes Lease until
// when it may still act for the lease, so that a replica that cannot renew,
// or a paused one that wakes after losing its lease (a zombie), stops
// calling the external service before another replica can lead.
//
// # Use
//
// Wrap the Lease lock (NewLease, or any resourcelock.Interface) with New,
// pass the Lock to ctrl.Options.LeaderElectionResourceLockInterface with
// the same LeaseDuration, and give it to clientpool.Options.Fence: the pool
// then refuses to start a call once Until has passed and ends each call's
// context there.
//
//	inner, err := fence.NewLease(cfg, fence.LeaseOptions{Namespace: ns, Name: "my-operator"})
//	lock, err := fence.New(inner, fence.Options{LeaseDuration: 15 * time.Second})
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
//		LeaderElection:                      true,
//		LeaderElectionResourceLockInterface: lock,
//		LeaseDuration:                       ptr.To(15 * time.Second),
//	})
//	pool, err := clientpool.New(clientpool.Options[string, *sdk.Client]{Dial: dial, Fence: lock})
//
// # Why the fence holds
//
// The Lock reads its clock just before each acquisition or renewal goes
// out, and on success sets Until to that time plus the lease duration the
// record carries, minus a margin. Another replica's client-go elector takes
// the lease only once it has seen the same record unchanged for that
// duration, counted from when it read the record, which is after the
// renewal landed, which is after it was sent; and its write carries the
// resourceVersion it read, so it fails if a renewal landed in between. So
// no other replica holds the lease before send time plus lease duration,
// and the margin absorbs a difference in clock rates and the flight of the
// last call.
//
// The elector restarts its count only when the record it reads differs
// from the one it saw before, and the record's times are stored to the
// second: renewals within one second (a retry period under a second) look
// alike, and the others count from the first of them. The Lock compares
// records as they do and counts from the first write of the run of
// identical records, failed attempts included (a write that failed on our
// side may have landed). Measured on the real Lease API before this rule:
// another replica's acquisition was sent 0.25s after a fence that assumed
// each renewal restarted the count, inside its 0.6s margin. Times are Go monotonic readings (time.Now), so a wall-clock
// step on either machine does not move the fence; a process that is
// stopped (SIGSTOP, a frozen VM whose monotonic clock keeps counting) finds
// its fence passed when it wakes.
//
// A write for another holder (the release on shutdown writes an empty
// holder) drops the fence before it is sent, and so does a read showing
// another holder or a missing Lease. A failed write leaves the fence as it
// was: the others still honour the last write that landed.
//
// # What it does not cover
//
//   - Writes to the Kubernetes API: they have optimistic concurrency of
//     their own; the fence is for services that have none.
//   - A Lease edited or deleted by hand: whoever creates it next leads at
//     once, and the fence can only drop when this replica next reads it.
//   - Clocks whose rates differ by more than the margin allows over one
//     lease duration (a fifth by default, far beyond real clock drift).
//   - A call already sent when the fence passes: the service may still run
//     it. The margin covers its flight; a fence cannot recall it. The pool
//     never reports such a call as a success: one that returns at or after
//     the fence, nil included, returns an error wrapping
//     clientpool.ErrFenced and counts in finale_clientpool_fenced_total,
//     so that the caller keeps what it keeps on a failure and the replica
//     that leads next observes what landed.
package fence
