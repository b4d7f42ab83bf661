// Package temporalbin builds, caches and runs the Temporal server that the
// G1 seed's own stack is tested against: a single process on
// go.temporal.io/server's temporaltest package (SQLite in memory, all four
// services in one process, the frontend on 127.0.0.1 and a free port,
// worker deployment versioning on).
//
// The binary comes from the separate module in tools/temporal, so finale's
// own go.mod never requires go.temporal.io/server and its 200 modules. It is
// built once by internal/binbuild into a cache directory, by default
// $XDG_CACHE_HOME/finale/temporal-<version> (os.UserCacheDir), or the
// directory named by FINALE_TEMPORAL_BIN_DIR, and rebuilt only when
// tools/temporal or the Go toolchain changes. A cold build takes about nine
// minutes on two cores; Ensure reports progress on the writer it is given.
//
// Start runs it as a child process with the control plane's process
// hygiene: its own process group (Stop signals everything it started), a
// parent-death signal (a test binary that panics leaves no server behind),
// SIGTERM then SIGKILL on Stop, and the tail of its log in every start
// error. The server announces readiness with one machine-readable line
// once its frontend answers and its namespace can be described.
//
// # Decisions
//
//   - One process per test binary, not per test: the server starts in about
//     two seconds, but tests isolate themselves by worker deployment names
//     instead, as they do by Kubernetes namespaces on the shared control
//     plane.
//   - The server forgets pollers after PollerHistoryTTL (5 s here, 5 min by
//     default): a worker deployment version can be deleted only once no
//     poller is remembered, and a test should not wait five minutes for that.
package temporalbin
