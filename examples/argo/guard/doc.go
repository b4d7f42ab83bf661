// Package guard protects a stock Argo Workflows installation from the G3
// seed incident (argo-workflows #17024): a successful Pod recorded as
// "Error: pod deleted" because Argo's status-capture finalizer was removed on
// a timer while the Workflow's reconciliation lagged.
//
// The guard puts a finalizer of its own (Finalizer) on every Pod a Workflow
// owns and Argo labels with it (LabelWorkflow), at admission: a
// MutatingAdmissionPolicy (Policy, Binding) adds it in the same request that
// creates the Pod, so there is no moment at which the Pod exists without
// it. Argo removes only its own finalizer (its cleanup patch keeps the
// others), so a deleted Pod stays Terminating, with its status, until the
// guard releases it.
//
// The guard releases only by capture's rule (package capture): the
// Workflow has recorded this Pod's node (its phase is final in
// status.nodes, or Argo has taken this very Pod's failure as a restart), or
// the Workflow is gone, being deleted, finished or terminated
// (spec.shutdown Terminate: cancelled), or the Pod has no Workflow owner
// (an orphan), or the Pod is being deleted in a terminating namespace. A Stop (spec.shutdown Stop) is not an end: Argo still
// records the nodes of finished Pods and runs the exit handler, which reads
// them, so the guard waits for the record or the final phase (Finished).
// Elapsed time never releases it. Unlike capture's default, the guard never
// writes a result into the Workflow: Argo owns its status, so a terminal Pod
// whose node is not recorded is held until Argo's workflow workers record it
// themselves, from the Pod that is still there. A held Pod past
// Options.PendingThreshold is reported (a Warning Event,
// finale_capture_overdue, the watchdog), and stays.
//
// # A terminating namespace
//
// Kubernetes 1.37 deletes a namespace's Pods first and nothing else, the
// Workflows included, while a Pod remains. When nothing records the nodes
// (Argo absent, its workers stopped, or its own Pod deleted first in the
// same namespace), holding the Pods for their Workflow would hang the
// namespace for ever. The Workflow goes with the namespace, so the guard
// releases a deleted Pod there (capture's ReasonNamespaceTerminating),
// counts it (finale_capture_releases_total{reason="NamespaceTerminating"})
// and emits EventReasonReleasedNamespaceTerminating, which the guard
// command sends to its own namespace since a terminating one refuses
// Events. Tenants cannot fake it: they cannot write Namespace objects. The
// guard reads and watches Namespaces for this (its ClusterRole).
//
// # A guard that is down
//
// Decision: a guard that is down must not go on marking Pods nobody will
// release, must be seen from outside, and must never release by time. So:
//
//   - The guard's leader renews a Lease (Heartbeat, HeartbeatName in its
//     namespace, DefaultHeartbeatDuration), and the policy takes that Lease
//     as its parameter: it adds the finalizer only while the Lease's
//     renewTime plus leaseDurationSeconds is after the request. Admission
//     CEL on kube-apiserver 1.37 has no clock (no now()) and the Pod has no
//     creationTimestamp yet at admission; the request time it compares is
//     the creator's managedFields entry, which the apiserver stamps with its
//     own time before mutating admission (both checked on the real
//     apiserver by the tests). Once the Lease has expired, new workflow Pods
//     are created with Argo's finalizer only: unprotected, as stock Argo,
//     but never stranded. No Lease at all (never started, uninstalled)
//     adds nothing (parameterNotFoundAction Allow). A stopped guard leaves
//     its Lease to expire, so that a rolling update marks every Pod.
//   - Pods it marked keep the finalizer: releasing them on a timer is the
//     seed's defect. They are visible without the guard: the Lease is a
//     finalizer holder Lease (watchdog.LabelFinalizerHolder), and `finale
//     audit` reports each deleting object held by a finalizer whose holder
//     Leases have all expired, at once and as a finding, with the Lease.
//     (kube-controller-manager 1.37 names no Pod finalizer in a terminating
//     namespace's conditions while Pods remain, so the namespace alone does
//     not say why it hangs.)
//   - The remedy is to start the guard again: it releases by the rule,
//     nothing lost. To remove the guard instead, Uninstall (`guard
//     uninstall`) removes the finalizer from every Pod first (Argo's own
//     untouched, in every namespace, terminating or not), then deletes what
//     marks (bindings, policy), waits until a dry-run workflow Pod goes
//     unmarked (outside the guard's namespace when that one is
//     terminating), releases Pods marked meanwhile, and deletes the
//     heartbeat Lease, the evidence finale audit reads, last. Stopped part
//     way, it says which step failed, how many Pods it released and what
//     is still in place; run again, it resumes.
//
// # Limits
//
// Nodes that Argo has offloaded to its database (status.offloadNodeStatusVersion
// with no nodes in the object) cannot be read here: such a Pod is held
// until the Workflow finishes. Compressed nodes (status.compressedNodes) are
// read. A Pod created while the policy was not installed, or while the
// guard's heartbeat had expired, has no guard finalizer and is not
// protected; CheckPolicy, run at start, refuses to start a guard whose
// policy is missing or is not bound to the Lease it renews. The guard's
// clock writes renewTime and the apiserver's stamps the request: they must
// agree to well within the heartbeat's duration.
package guard
