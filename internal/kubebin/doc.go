// Package kubebin builds and caches the Kubernetes binaries that finale's
// local control plane runs: etcd, kube-apiserver, kube-controller-manager and
// kubectl.
//
// The binaries come from Go modules (k8s.io/kubernetes and
// go.etcd.io/etcd/server/v3/embed), built from the separate module in
// tools/kube so that finale's own go.mod never requires k8s.io/kubernetes.
// tools/kube is the one place that module is edited (go get, go mod tidy,
// its own tests); module.txtar, embedded here, is its copy, made by
// `make kube-embed` and held equal to it by TestArchiveIsToolsKube. The
// build always uses the embedded copy, because the module zip that a user
// gets finale from leaves nested modules out: a checkout and the module
// cache build the same files and compute the same stamp.
//
// They are built once into a cache directory, by default
// $XDG_CACHE_HOME/finale/kube-<versions> (os.UserCacheDir), or the directory
// named by FINALE_KUBE_BIN_DIR, and rebuilt when the stamp there differs: a
// hash of the build module's go.mod, go.sum and sources, the flags and the
// Go version.
//
// A cold build takes minutes; Ensure reports progress on the writer it is
// given rather than staying silent. Concurrent callers (parallel test
// packages) serialize on a file lock, so the build runs once.
package kubebin
