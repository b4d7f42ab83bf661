// Package stack runs the stock Argo Workflows controller (v4.1.4, built by
// internal/argobin) as a child process against finale's local control
// plane, and plays the two parts of a cluster that the control plane lacks:
// the kubelet (Pod status) and Argo's executor (the WorkflowTaskResult that
// argoexec writes from the Pod's wait container).
//
// The controller runs namespaced, with leader election off and
// ARGO_POD_STATUS_CAPTURE_FINALIZER=true, as the seed incident (argo-workflows
// #17024) ran it, and can be restarted with another number of workflow
// workers (zero stops them, the report's fault injection) while its Pod
// cleanup workers keep running.
//
// Process hygiene is the control plane's: an own process group, SIGKILL on
// the parent's death, SIGTERM then SIGKILL to the group on Stop, a log file
// whose tail goes into every error. One thing cannot be changed without
// patching Argo: it serves /healthz on :6060 on every interface; readiness
// here is therefore read from the controller's own effects (Install and
// the tests wait on conditions), never from that port.
package stack
