// Package controlplane runs a real, local Kubernetes control plane for tests
// and the demo: etcd, kube-apiserver and kube-controller-manager (with the
// namespace and garbage-collector controllers), as child processes on
// 127.0.0.1, free ports and a temporary directory.
//
// Use it through package testenv in tests; directly, Start one and use its
// Config (or Kubeconfig, for kubectl), and wait with the helpers here,
// never with sleeps:
//
//	cp, err := controlplane.Start(ctx, controlplane.Options{})
//	defer cp.Stop()
//	c, err := client.New(cp.Config, client.Options{})
//	err = controlplane.DeleteAndWait(ctx, c, ns, time.Minute) // the namespace controller runs
//
// finale's guarantees are about namespace deletion, owner garbage collection
// and finalizers: exactly what controller-runtime's fake client (and
// envtest, which runs no controller manager) does not implement, so every
// real-stack test runs on this. Tests usually reach it through the testenv
// package, which adds CRDs, PostgreSQL and the right stop order.
//
// # The binaries
//
// The binaries are built from Go modules (k8s.io/kubernetes v1.37.2 and
// etcd v3.7.0) with the Go toolchain and the module proxy alone, by the
// first Start on a machine, or beforehand with
//
//	go run github.com/finale-dev/finale/controlplane/kubeinstall@<version>
//
// They are built in a module of their own, written to a temporary
// directory from files this package carries, so they work the same when
// finale is a dependency fetched from the module proxy as in a checkout,
// and so that a dependent's go.mod never requires k8s.io/kubernetes. A cold
// build takes about 8 minutes on 2 cores and needs about 1 GiB of module
// cache and 4 GiB of build cache; Start reports its progress on
// Options.Log.
//
// They are cached in $FINALE_KUBE_BIN_DIR, else in
// <user cache dir>/finale/kube-v1.37.2-etcd-v3.7.0 (os.UserCacheDir:
// ~/.cache on Linux), or in Options.BinDir. A stamp there records a hash of
// what they were built from (the build module's files, linker flags, Go
// version): binaries whose stamp differs, left by another finale version or
// put there by hand, are rebuilt, never used. Builds that race (parallel
// test packages) take a file lock, so the build runs once.
//
// # Processes
//
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
