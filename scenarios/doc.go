// Package scenarios reproduces finale's three seed incidents end to end on a
// real control plane and a real PostgreSQL, against the reference operator
// (examples/postgres), and runs fault campaigns against it, checking
// invariants at the end of every run.
//
// # What it proves
//
// Each named scenario (Names, Run) has a naive counterpart, the same steps
// against the build with the guarantee switched off (controller.Options.Naive,
// or upstream's timer for the capture finalizer). The guarded build must hold
// every invariant, the naive one must break at least one; a scenario that
// cannot fail on the naive build proves nothing, so Result.OK checks both
// directions.
//
//   - poisoned-client (G1): the operator's established connection to
//     PostgreSQL is frozen through a TCP proxy (accepted, never answered,
//     never closed) while new dials work, and a Role is deleted. Guarded: the
//     call times out, the pool evicts and redials, the deletion finishes within
//     ten call timeouts. Naive: the same connection is reused forever.
//   - namespace-deletion (G2): a namespace with a Server, its Secret, two Roles
//     and a Database is deleted in each order (all at once, Secret first,
//     Server first, operator down). Guarded: nothing tagged is left without an
//     owner or a record, the namespace goes. Naive: every order leaks.
//   - lagging-owner (G3): a Job's Pods succeed while the Job's workers are
//     paused, the clock jumps past upstream's two-minute timer, the Pods are
//     deleted. Guarded (capture.Releaser): the results are persisted before the
//     Pods go. Naive (the timer): the resumed owner concludes "Error: pod
//     deleted".
//   - temporal-poisoned-client (G1 on the seed's own stack): the Temporal
//     example operator (examples/temporal) with the real SDK against a real
//     Temporal server (Env.Temporal, or one started for the run). Its cached
//     client is stalled through an HTTP/2-aware proxy (PINGs answered, calls
//     never) and a WorkerDeployment is deleted. Guarded: the first
//     timed-out call evicts and the deletion finishes, the server-side
//     deployment gone. Naive (temporal-worker-controller v1.7's pool): still
//     stuck after ten minutes on the operator's clock, CleanupBlocked; once
//     the run strips its finalizer the server-side deployment is left behind.
//   - argo-status-capture (G3 on the seed's own stack): the report's
//     sequence on the stock Argo Workflows controller v4.1.4 (internal/argo
//     plays kubelet and executor). Guarded (the guard of examples/argo):
//     the node is Succeeded with its output and the Pod goes after. Naive
//     (the stock controller alone): "Error: pod deleted".
//
// # Invariants
//
// CheckNoLeak, CheckFinished, CheckNoLostResult and CheckNoWrongDelete are
// exported so users can run them against their own operators. They are scoped
// (Scope) to one run's objects, because PostgreSQL and the control plane are
// shared; SeedUntagged plants roles and a database without finale's tag (some
// with somebody else's comment) that must survive every run.
//
// # Campaigns
//
// CrashAfterEveryWrite first runs a Role's or a Database's lifecycle (create,
// update, delete, another create, namespace deletion) with a recording client
// (faultinject.Script) to enumerate every API write the operator makes, then
// runs it once per write, crashing the operator right after that write lands
// (faultinject.Fault.Crash: the manager is cancelled, its caches and its
// connection pool dropped), restarting it clean and checking the invariants.
// Writes are identified as "the Nth call of this verb on this kind", which is
// what a Script can match; a run whose Nth call never comes (the operator's
// writes vary slightly between runs) is counted as not reached.
//
// The same recording run also enumerates every external call: the operator's
// PostgreSQL statements, heard through controller.Options.Statements (called
// after each statement's round trip: Exec, a QueryRow's Scan, Query). A
// statement is identified as "the Nth round trip of this SQL text" (whitespace
// collapsed), and one more run per statement crashes the operator right after
// it, the same way (its manager cancelled from the hook), restarts it and
// checks the invariants. CrashCampaign's MaxExternal samples the statements
// evenly (first and last kept) when a caller, such as the test suite, must
// bound the time; CrashAfterEveryWrite crashes after every one.
//
// Campaign draws K schedules from a seed (run i uses Seed+i, math/rand/v2 PCG,
// so a failing run replays alone with its printed seed and Runs 1): creates,
// deletes, Secret and namespace deletions, proxy freeze, reset, refuse and
// latency, operator restarts, paused workers (the Role controller's alone),
// stale views (the Role controller's watch events delayed by up to two
// seconds, faultinject.EventFault put in through
// controller.Options.WrapEventHandler) and clock jumps (past the hold timeout
// too). Every fault is healed before the namespace is deleted and the
// invariants checked.
//
// # Failover
//
// FailoverCampaign (the scenario "failover") runs two replicas of the
// reference operator as processes of their own, copies of the running
// executable that ReplicaMain turns into the operator's command
// (examples/postgres/cmd/operator/app), elected through the real Lease API
// (lease 3s, renew deadline 2s, retry 0.5s) and fenced by it (package
// fence). Their PostgreSQL traffic goes through a tap that reads the
// frontend protocol's framing and attributes every session, statement,
// Parse, Bind, Terminate and cancel request to its replica (by the
// application_name pgx takes from $PGAPPNAME; a cancel by the backend it
// names); a poller keeps the Lease's holders and their acquireTimes. Each
// run, seeded (run i uses Seed+i), SIGKILLs the leader right after its
// k-th CREATE or DROP (k random; k = 0 is after its first statement, the
// work's checks under way) during a sweep of records whose owners were deleted
// while no replica ran, a burst of creates and a namespace deletion,
// starting a new standby after each; cuts the leader off from the API
// server during a burst (each replica reaches it through a proxy of its
// own, whose connections are reset and refused), PostgreSQL still
// reachable, so that it cannot renew; then SIGSTOPs the leader during a
// burst, waits until the standby leads and has finished the burst, and
// SIGCONTs it. It reports, per case, the takeover (fault to the
// successor's acquireTime), its first statement and the end of the work,
// and checks no-leak, finished, no-wrong-delete, no-duplicate (one role or
// database per owner), no-lost-record (every live Role and Database has its
// record) and no-zombie-call: no session, statement, Parse or Bind from a
// replica after the next holder's acquireTime (the holder's clock before
// its acquiring write, so the check is strict), and nothing the tap could
// not attribute. The cut-off and the woken replicas must also exit. The naive counterpart
// runs the pause alone with --naive (no fence): the woken replica's
// statements are seen.
//
// The failover faults (leader-kill, leader-partition, leader-pause) are
// this scenario's, not steps of Campaign: Campaign's operator runs in the
// test process, where a replica can be neither killed nor stopped,
// and its clock jumps, which leader election's leases cannot follow.
//
// # Decisions
//
//   - Each run gets a fresh namespace, a fresh records namespace per world and
//     a random prefix on every PostgreSQL name; the crash campaign runs two
//     worlds side by side, each operator's caches restricted to its own
//     namespaces, which halves its wall time without the runs seeing each
//     other.
//   - "Paused workers" in the randomized campaign pauses the Role controller's
//     workers alone (a faultinject.Gate put in through
//     controller.Options.WrapReconciler) while the Database and Server
//     controllers, the hold and the sweeper go on; the next heal, restart or
//     the end of the schedule resumes them. The G3 scenario pauses one
//     controller's workers with faultinject.Gate too, as its seed requires.
//   - An external crash point fires after the statement's round trip, not
//     before its reply is lost: "the call landed, the process died before it
//     recorded that" is the case the cleanup records must cover. Statements
//     the crashed operator still starts fail on its cancelled context.
//   - Stale views delay the Role controller's events rather than drop them:
//     a dropped deletion event is seen again only at the informer's resync
//     (hours), so a dropped-events step would need a restart to heal and
//     proves what the restart step already does.
//   - The naive runs clean up after themselves (leaked roles and databases are
//     dropped, stuck finalizers removed) so later runs and leak checks start
//     clean.
//
// # Threat model
//
// Test and demo harness: it drives a throwaway control plane and PostgreSQL,
// connects only to loopback, and drops roles and databases only within its
// own random name prefix. Do not point it at a cluster or a server you care
// about.
package scenarios
