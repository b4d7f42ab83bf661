// Package app is the reference operator's command (examples/postgres/cmd/operator):
// its flags and the wiring of the manager, the leader election and its
// fence, and the operator. It is a package so that a harness can run the
// very same command in a process of its own (scenarios runs two replicas
// of it and kills their leader).
//
// # Leader election and the fence
//
// With --leader-elect the election's Lease lock is wrapped by fence.New
// and given both to the manager (LeaderElectionResourceLockInterface) and
// to the operator's connection pool (controller.Options.Fence), so that no
// PostgreSQL call starts, or runs on, once another replica may hold the
// lease. Defaults are controller-runtime's: lease duration 15s, renew
// deadline 10s, retry period 2s; the fence margin is a fifth of the lease
// duration, so the fence ends 12s after the last renewal was sent, after
// the renew deadline (a leader whose renewals fail stops leading before its
// fence stops it) and 3s before any other replica can lead. Timings the
// elector would reject are rejected before anything starts (ErrFlags).
// --naive turns the fence off with the other guarantees.
package app
