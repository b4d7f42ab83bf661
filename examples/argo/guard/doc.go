// Package guard protects a stock Argo Workflows installation from the G3
// seed incident (argo-workflows #17024): a successful Pod recorded as
// "Error: pod deleted" because Argo's status-capture finalizer was removed on
// a timer while the Workflow's reconciliation lagged.
//
// The guard puts a finalizer of its own (Finalizer) on every Pod a Workflow
// owns and Argo labels with it (LabelWorkflow), at admission: a MutatingAdmissionPolicy (Policy, Binding) adds it
// in the same request that creates the Pod, so there is no moment at which
// the Pod exists without it. Argo removes only its own finalizer (its
// cleanup patch keeps the others), so a deleted Pod stays Terminating, with
// its status, until the guard releases it.
//
// The guard releases only by capture's rule (package capture): the
// Workflow has recorded this Pod's node (its phase is final in
// status.nodes, or Argo has taken this very Pod's failure as a restart), or
// the Workflow is gone, being deleted, finished or terminated
// (spec.shutdown Terminate: cancelled), or the Pod has no Workflow owner
// (an orphan). A Stop (spec.shutdown Stop) is not an end: Argo still
// records the nodes of finished Pods and runs the exit handler, which reads
// them, so the guard waits for the record or the final phase (see Finished). Elapsed time never releases
// it. Unlike capture's default, the guard never writes a result into the
// Workflow: Argo owns its status, so a terminal Pod whose node is not
// recorded is held until Argo's workflow workers record it themselves, from
// the Pod that is still there. A held Pod past Options.PendingThreshold is
// reported (a Warning Event, finale_capture_overdue, the watchdog), and
// stays.
//
// # Limits
//
// Nodes that Argo has offloaded to its database (status.offloadNodeStatusVersion
// with no nodes in the object) cannot be read here: such a Pod is held
// until the Workflow finishes. Compressed nodes (status.compressedNodes) are
// read. A Pod created while the policy was not installed has no guard
// finalizer and is not protected; CheckPolicy, run at start, refuses to
// start a guard whose policy is missing.
package guard
