// Package kubebin builds and caches the Kubernetes binaries that finale's
// local control plane runs: etcd, kube-apiserver, kube-controller-manager and
// kubectl.
//
// The binaries come from Go modules (k8s.io/kubernetes and
// go.etcd.io/etcd/server/v3/embed), built from the separate module in
// tools/kube so that finale's own go.mod never requires k8s.io/kubernetes.
// They are built once into a cache directory, by default
// $XDG_CACHE_HOME/finale/kube-<versions> (os.UserCacheDir), or the directory
// named by FINALE_KUBE_BIN_DIR, and rebuilt only when tools/kube changes: a
// stamp file records a hash of its go.mod, go.sum and sources.
//
// A cold build takes minutes; Ensure reports progress on the writer it is
// given rather than staying silent. Concurrent callers (parallel test
// packages) serialize on a file lock, so the build runs once.
package kubebin
