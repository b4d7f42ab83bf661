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
// The first Start on a machine, or beforehand
//
//	go run github.com/finale-dev/finale/controlplane/kubeinstall@<version>
//
// puts Kubernetes v1.37.2's kube-apiserver, kube-controller-manager and
// kubectl, and an etcd, into a cache, each from the first source that has
// it, and says which: a kubebuilder envtest asset directory of exactly that
// version ($KUBEBUILDER_ASSETS, or setup-envtest's default directory; it
// has no kube-controller-manager), the official release binaries from
// dl.k8s.io (or the mirror $FINALE_KUBE_RELEASE_URL names; "off" turns
// downloads off), each checked against its published SHA-256 before use (a
// mismatch fails Start; nothing unverified is run), else a build from Go
// modules. An unreachable release site is given up within seconds. etcd is
// always built (seconds): a small program on etcd's embed package.
//
// The build needs the Go toolchain and the module proxy alone. It happens
// in a module of its own, written to a temporary directory from files this
// package carries, so it works the same when finale is a dependency
// fetched from the module proxy as in a checkout, and so that a
// dependent's go.mod never requires k8s.io/kubernetes. A cold build takes
// about 8 minutes on 2 cores (far longer on a loaded machine) and needs
// about 1 GiB of module cache and 4 GiB of build cache; Start reports its
// progress on Options.Log.
//
// They are cached in $FINALE_KUBE_BIN_DIR, else in
// <user cache dir>/finale/kube-v1.37.2-etcd-v3.7.0 (os.UserCacheDir:
// ~/.cache on Linux), or in Options.BinDir. A record there (the build's
// stamp, or the source, size and SHA-256 of each binary) says what they
// are: binaries that differ from it, left by another finale version or put
// there by hand, are replaced, never used. Concurrent Starts (parallel
// test packages) take a file lock, so the work is done once.
//
// # Kubernetes versions
//
// Options.KubernetesVersion (or $FINALE_KUBE_VERSION) chooses the server:
// v1.37.2 by default, or v1.33 (v1.33.13, with etcd v3.5.21, cached in
// kube-v1.33.13-etcd-v3.5.21), the oldest Kubernetes server finale
// supports, on which make test runs the library's real-stack tests as
// well. On both, the namespace controller deletes a namespace's Pods before
// anything else in it (OrderedNamespaceDeletion): on v1.33 a beta feature,
// on by default, that a cluster may turn off; on v1.37 always.
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
// # CRDs
//
// Options.CRDs are installed, and established, before the controller
// manager starts, so that its garbage collector watches their kinds from
// its start. CRDs installed later (InstallCRDs) are watched only from the
// collector's next discovery, about 30 s after: a measurement taken in
// between misses the load that watch adds in a cluster that has had the
// CRDs a while.
//
// There is no scheduler, kubelet or serviceaccount controller: a test that
// needs a Pod to finish sets its status itself, as a kubelet would.
package controlplane
