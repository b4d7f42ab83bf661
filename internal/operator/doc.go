// Package operator runs the reference PostgreSQL operator inside this
// process, for the demo, the benchmarks and the fault scenarios: one
// manager with its metrics and health endpoints off (several run in one
// process, one after the other), the API client optionally wrapped by a
// fault script, and a Stop that drops everything in memory, the
// connection pool included, as a crash would.
package operator
