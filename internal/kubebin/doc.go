// Package kubebin provides and caches the Kubernetes binaries that finale's
// local control plane runs: etcd, kube-apiserver, kube-controller-manager and
// kubectl, of one Release: Current (v1.37.2, what every control plane runs
// by default) or Oldest (v1.33.13, the oldest server finale supports).
//
// # Sources
//
// Each binary comes from the first source that has it (Installer):
//
//  1. a kubebuilder envtest asset directory ($KUBEBUILDER_ASSETS, else
//     setup-envtest's default ~/.local/share/kubebuilder-envtest/k8s/<version>-<os>-<arch>)
//     whose binary reports exactly the release's version: envtest ships
//     kube-apiserver and kubectl, not kube-controller-manager, which finale
//     needs for namespace deletion and garbage collection;
//  2. the official release binaries from https://dl.k8s.io (or the mirror
//     $FINALE_KUBE_RELEASE_URL names; "off" turns downloads off), each
//     checked against its published .sha256 before it gets its name: a
//     mismatch fails, and nothing unverified is ever run. An unreachable
//     site is given up within seconds (a 3 s connect timeout; here, where
//     it does not resolve, in about 1 s);
//  3. a build from Go modules, the fallback: k8s.io/kubernetes and
//     go.etcd.io/etcd/server/v3/embed, built from the separate module in
//     tools/kube (tools/kube133 for Oldest) so that finale's own go.mod never
//     requires k8s.io/kubernetes. etcd always comes from here: it is a small
//     program on etcd's embed package, built in seconds, whose flags the
//     control plane uses, and dl.k8s.io has no etcd.
//
// The log says which source each binary came from, and the cache records
// it (Sources).
//
// tools/kube is the one place its module is edited (go get, go mod tidy,
// its own tests); module.txtar, embedded here, is its copy, made by
// `make kube-embed` and held equal to it by TestArchiveIsToolsKube (and
// module133.txtar of tools/kube133). The build always uses the embedded
// copy, because the module zip that a user gets finale from leaves nested
// modules out: a checkout and the module cache build the same files and
// compute the same stamp.
//
// The binaries go once into a cache directory, by default
// $XDG_CACHE_HOME/finale/kube-<versions> (os.UserCacheDir), or, for
// Current, the directory named by FINALE_KUBE_BIN_DIR. A directory built
// whole holds the build's stamp (a hash of the build module's go.mod,
// go.sum and sources, the flags and the Go version) and is rebuilt when
// it differs; one filled from several sources holds sources.json (each
// binary's source, size and SHA-256, and the stamp of what was built) and
// is filled again when a binary or the build module changed.
//
// A cold build takes minutes; Ensure reports progress on the writer it is
// given rather than staying silent. Concurrent callers (parallel test
// packages) serialize on a file lock, so the work is done once.
package kubebin
