// Package check is the deletion test for any operator, finale or not: it
// runs the operator under test against a real local control plane of its
// own (package controlplane: etcd, kube-apiserver, and the
// kube-controller-manager's namespace and garbage-collector controllers),
// makes a world of its objects, deletes it in every order and under
// faults, and checks that every deletion finished, that nothing was left
// in the external service and that nothing was created twice. The
// command `finale check -f operator.yaml` runs it; a Go test calls Run (or
// Test) with a Spec.
//
// Use it from the command line on a description of the operator, or from a
// Go test:
//
//	finale check -f operator.yaml
//
//	spec, err := check.Load("operator.yaml")
//	rep := check.Test(t, spec, check.Options{Quick: true})
//
// # The description
//
// A Spec (Load reads one from YAML, strictly: an unknown or misspelt field
// is an error naming it) says:
//
//   - how to start the operator: a command run as a process in a group of
//     its own (so that SIGKILL is real and takes whatever it started), its
//     environment, and manifests an admin would put in its namespace; from
//     Go, a Start function for an in-process manager instead;
//   - its CRDs (files or directories);
//   - the world: a parent (connection) object, its credential Secret, and a
//     template for N dependents ({{.Index}}); an operator without a
//     connection object leaves the parent out, one without credentials the
//     Secret (the experiments about what is left out are skipped);
//   - fault points: the external service's addresses the operator dials.
//     check puts a faultinject.Proxy in front of each and gives the
//     operator the proxy's address through the templates ({{.Proxy "db"}});
//   - optionally the external service itself, a command check starts once;
//   - a probe: a command printing one external resource identity per line
//     (or, from Go, a function) listing what exists in the external
//     service. A run counts only identities that were not there when it
//     began, so the probe may list everything the service holds. An
//     operator that makes no external resource leaves it out (and the
//     fault points): no-leak and no-duplicate are then not checked,
//     escaped is skipped, and the report says so;
//   - when a dependent is ready (Readiness): a status condition (type,
//     status, reason) or a JSONPath expression on the object and the
//     value its results must have; required without a probe;
//   - timeouts: the bound every deletion must finish within, the
//     operator's own longest deletion timeout (timeouts.hold), and how
//     long its sweeper takes to clean what escaped (timeouts.sweep: its
//     settle window, clock skew and pass interval, and its start), and
//     how long a run may show no progress before a wait ends early
//     (timeouts.stuck);
//   - optionally, for owners with result-capture children (a Workflow and
//     its Pods), results: the children's kind, a results probe (a command
//     printing "child ID", "produced ID" and "persisted ID" lines, or a
//     function returning a ResultSet: the children that exist, the results
//     they produced, the results their owners persisted), a hook playing
//     what makes a child run (the kubelet: check's control plane has
//     none) and one making every child finish and produce its result; and
//     operator.stalled, how the operator runs with its recording of
//     results stalled while the rest of it runs (arguments appended to its
//     command; OperatorEnv.Stalled for a Start function). With results,
//     the probe and the fault points may be left out (an operator whose
//     only concern is its children's results).
//
// Every string of the operator, the service, the fault points, the probe
// and the manifests, and the CRD paths, is a text/template evaluated with
// Values: the run's namespaces, the kubeconfig check wrote for the
// operator (and a second one for its cache, {{.CacheKubeconfig}}), the
// proxies' addresses, the service's address, {{env "NAME"}}. Each field
// has the values it has when it is evaluated (its tmpl tag: the service
// starts before any run, the CRD paths are read first); Load evaluates
// every one with placeholders and refuses a value out of its field's.
//
// # Experiments
//
// Each run has a fresh owner namespace and a fresh operator namespace
// (records, leases, keys: {{.OperatorNamespace}}), a fresh operator
// process, the Secret, the parent and the dependents, and waits until the
// probe lists every resource they make (and, with a readiness rule, every
// dependent is ready). The parent and the dependents may be cluster-scoped
// (the control plane says which kinds are): they are then created in no
// namespace, their names must hold the run ({{.Run}}), and each run
// deletes them itself with the owner namespace. Then, by experiment
// (Experiments, Names):
//
//   - order-all-at-once, order-dependents-first, order-parent-first,
//     order-secret-first, order-foreground: the namespace deleted at once,
//     or after the dependents, the parent, the Secret; or the parent and
//     the namespace deleted with propagationPolicy Foreground;
//   - kill-during-creates, kill-during-deletion: the operator SIGKILLed at
//     random moments (seeded) within the time the creates took in the
//     all-at-once run, or the dependents' cleanup in the dependents-first
//     run, and restarted at once;
//   - operator-down: the operator killed, the namespace deleted, the
//     operator kept down past timeouts.hold, then started again;
//   - escaped (with timeouts.sweep): the operator killed, the namespace
//     deleted, every dependent's finalizers removed by hand once it is
//     deleting, so that the dependents go without their cleanup; once
//     they are gone, the operator started again: its sweeper (ledger and
//     sweep) must clean what escaped within timeouts.sweep;
//   - transport-freeze, transport-stall: the operator's established
//     connections to the external service frozen (TCP: open and silent),
//     or stalled (HTTP/2: PINGs answered, nothing else), new ones served;
//   - stale-apiserver: a second kube-apiserver on the same etcd behind a
//     lagging link (controlplane's APIServers); the operator's cache lists
//     and watches through it when it takes a second kubeconfig
//     ({{.CacheKubeconfig}}), otherwise everything it does goes through it
//     (the report says so);
//   - own-namespace: the operator's namespace deleted, then the
//     dependents, then the owner namespace, the operator running;
//   - results-stalled (with results): once the children run, the operator
//     restarted stalled (without operator.stalled: killed), every child
//     made to finish and produce its result (results.complete), every
//     object of the children's kind deleted, the stall kept until they
//     are gone or past timeouts.hold, the operator back whole; then the
//     dependents and the namespace deleted.
//
// Each experiment isolates its fault: those that are not about the order
// (the kills, the transport, the stale view, the operator's namespace)
// delete the dependents first and the namespace after, the order in which
// nothing the cleanup needs is missing, so that an operator without a
// hold breaks the order experiments and not every other one too.
//
// # Invariants and verdicts
//
// A run holds when: the creates finished within timeouts.ready (ready);
// every namespace it deleted was gone within timeouts.finish, no object
// left Terminating (finished); the probe listed nothing of the run's
// within the same bound (no-leak: a sweeper may finish after the
// namespace went; for escaped, within timeouts.sweep of the operator's
// return); the probe never listed more distinct resources than
// the objects make (no-duplicate). A broken run reports its seed, the
// command that runs it alone (--seed N --only X --runs 1), the faults, the
// objects left behind as kubectl would list them with their finalizers,
// the probe's leftovers, the timeline of the run (every step, every
// external resource appearing and going) and the end of the operator's
// log. An experiment breaks when one of its runs does; in the mode's runs
// it stops at its first broken run.
//
// A wait on the operator (the creates, a deletion, the service clean after
// it) ends before its bound, broken, once the run's fingerprint (the
// objects in its namespaces and the operator's with their finalizers and
// deletion marks, the namespaces' and its objects' conditions, the probe's
// last listing, the operator's process) stayed the same for timeouts.stuck,
// never less than timeouts.hold with operator-down's margin, nor, once the
// namespaces are gone, timeouts.sweep.
//
// With results, results-stalled also checks no-lost-result: within
// timeouts.finish of the operator's return, every result a child produced
// (at any moment of the run: check keeps every one the results probe ever
// listed, since the place a result waits in may go too) is persisted by
// its owner or its child still exists, and every child it deleted is gone
// (finished). The decision is lostResults: produced, minus persisted,
// minus the children that exist. A broken run lists the lost IDs with the
// rest of its reproduction. A description without results gets a note that
// no-lost-result was not checked.
//
// After each run, whatever happened, check heals the faults, stops the
// operator (SIGTERM, then SIGKILL after operator.grace), removes the
// finalizers of anything left and deletes both namespaces, so the next run
// starts clean; what a broken run leaked stays in the external service
// (later runs subtract it).
//
// # Cost
//
// Runs on one control plane go one at a time: two operators watching the
// same cluster would act on each other's objects. Options.Lanes runs
// experiments side by side, each lane on a stack of its own; by default 2
// lanes when no run can see another lane's resources (docs/check.md,
// "Lanes"). A namespace deletion whose objects carry
// finalizers takes at least about 8 seconds of the namespace controller's
// own (it looks again after half its 15-second estimate), so a run takes
// 8 to 25 seconds. Measured on 2 shared cores (docs/benchmarks.md): --quick (at most 2
// dependents, one run per experiment, two kills per crash run) on the
// reference operator: 12 runs, 6 kills, 3 minutes 14 seconds; the default
// (3 runs of each crash experiment, 3 kills each) took about 20 seconds
// more than --quick when last measured.
//
// # Threat model
//
// A test harness: it runs the commands the description names with the
// user's own rights, on a control plane it starts on 127.0.0.1, and hands
// the operator an admin kubeconfig of that control plane. Its proxies
// listen on loopback only. Point fault points and probes only at
// services started for the test.
package check
