// Package binbuild builds and caches the real servers finale's tests and
// demo run as child processes (the Kubernetes binaries, the Temporal
// server, the Argo workflow-controller) from Go modules that are never part
// of finale's own go.mod.
//
// A Spec names a build module (its go.mod, go.sum and sources, as an
// fs.FS, so the files may come from a checkout's tools/ directory or be
// embedded in a package), the packages to build and the linker flags.
// Ensure builds them into a cache directory once and records a stamp: a
// hash of the module's files, the flags, the target list and the Go
// version. A directory whose stamp differs is rebuilt, whatever put the
// binaries there, so stale binaries are never used silently.
//
// The module's files are copied into a fresh directory under the cache
// before building, so a build never writes into the source tree and works
// the same from an embedded copy. Concurrent callers (parallel test
// packages) serialize on a file lock in the cache directory, so the build
// runs once. A cold build takes minutes: Ensure reports progress every 30
// seconds rather than staying silent.
package binbuild
