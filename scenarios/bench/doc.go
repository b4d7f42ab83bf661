// Package bench measures what the reference operator's guarantees cost, on
// a real control plane and a real PostgreSQL, against a baseline measured
// in the same run:
//
//   - Lifecycle: N Roles created, all Ready, deleted, all gone (every role
//     dropped), with the guarantees on (cleanup records, hold, evicting
//     pool), with the hold alone (no records) and as the naive build of
//     the same operator. It reports the wall times, their ratios, the API
//     writes per Role counted at the operator's client, and the CPU the
//     stack's processes used. Each build runs twice, in a mirrored order
//     (on, hold, off, off, hold, on), and the times are summed per build,
//     so none profits from its place (a fresher etcd, a warmer API
//     server). The hold alone is what a build whose records cost the API
//     server nothing would come to, by the targets' measure. After each
//     guarantees-on run, the API requests the guarantees add are sent
//     alone on its stack (CPURequests); added to the naive build's CPU,
//     they give the CPU ratio they make by themselves (CPUFloor). Then
//     builds run side by side with the naive build, four rounds of three
//     pairs (Pair): the guarantees-on build, and, to tell what each
//     guarantee costs, a build with cleanup records alone and one with
//     the hold alone. A pair's two builds run at once, each on servers of
//     its own with the operator as a process of its own, so that both see
//     the machine at the same speed while both run (runs one after the
//     other see it change by tens of percent); the table gives the ratio
//     of the CPU each stack's processes used, summed, and the least and
//     greatest pair.
//   - NamespaceDeletion: a namespace holding N Roles deleted, to gone,
//     against dropping as many roles directly over one connection.
//   - Requests: a cleanup record's write and removal against an empty
//     ConfigMap's create and delete and against the two live reads before
//     a create, N of each on one API server (BenchmarkGuaranteeRequests).
//   - Scale: each build once at 10,000 Roles across 100 namespaces, the
//     operator as a process of its own: create to Ready, delete to gone,
//     the operator's peak RSS, the records' objects and bytes, and the
//     API server's request, watch and watch-event counts from its
//     /metrics.
//
// SweepRows adds the sweeper's pass over many records (internal/sweepbench)
// to the same table. `finale-lab bench` prints the rows (-all every part,
// in one table: make bench). Waiting is done on the operator's own
// informer cache, so the measurement adds no load to the API server it
// measures.
package bench
