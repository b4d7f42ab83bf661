// Package controlplane runs a real, local Kubernetes control plane for tests
// and the demo: etcd, kube-apiserver and kube-controller-manager (with the
// namespace and garbage-collector controllers), as child processes on
// 127.0.0.1, free ports and a temporary directory.
//
// finale's guarantees are about namespace deletion, owner garbage collection
// and finalizers: exactly what controller-runtime's fake client does not
// implement, so every real-stack test runs on this.
//
// The binaries come from internal/kubebin (built from Go modules and cached).
// Each process runs in its own process group with a parent-death signal, and
// Stop ends every one of them; several control planes can run at once.
//
// There is no scheduler, kubelet or serviceaccount controller: a test that
// needs a Pod to finish sets its status itself, as a kubelet would.
package controlplane
