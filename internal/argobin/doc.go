// Package argobin builds and caches the stock Argo Workflows controller
// (workflow-controller v4.1.4) that the G3 seed and the guard's tests run.
//
// The binary comes from the Go module proxy, built from the separate module
// in tools/argo so that finale's own go.mod never requires argo-workflows,
// by internal/binbuild: once into a cache directory, by default
// $XDG_CACHE_HOME/finale/argo-<version> (os.UserCacheDir), or the directory
// named by FINALE_ARGO_BIN_DIR, and rebuilt only when tools/argo changes.
//
// One module of v4.1.4's dependency graph fails checksum-database
// verification (a pseudo-version of go-containerregistry's k8schain that
// the database answers 404 for); the build exempts exactly that module path
// with GONOSUMDB. go.sum in tools/argo still pins its hash.
//
// ModuleDir finds the argo-workflows module in the module cache; its
// subpackage argocrd reads Argo's CRDs from there. They are apart so that
// argoinstall, which make test and make argo run before anything else of
// the module is compiled, builds from the standard library and binbuild
// alone rather than compiling the Kubernetes API types first.
package argobin
