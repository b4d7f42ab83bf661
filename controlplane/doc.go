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
// # Several apiservers
//
// Options.APIServers (or AddAPIServer on a running control plane) starts
// more kube-apiservers on the same etcd. Each extra one reaches etcd
// through its own APIServer.EtcdLink, a faultinject.LagProxy: SetLag makes
// everything etcd sends it arrive that much later, so its watch cache, and
// every cached list and watch it serves, is that far behind (measured: a
// write through the first apiserver seen through the second's watch after
// the lag, to within milliseconds, from 0.1 s to 10 s); Partition cuts it
// off. A Front is what a client dials instead of one apiserver, a load
// balancer that Route fails over to another (established connections
// reset); Kill and Restart stop and start an extra apiserver. Together they
// let a test point an operator's cache at a lagging apiserver while its
// writes go to another, and move either at any time.
//
// There is no scheduler, kubelet or serviceaccount controller: a test that
// needs a Pod to finish sets its status itself, as a kubelet would.
package controlplane
