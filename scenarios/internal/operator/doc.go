// Package operator runs the reference PostgreSQL operator inside this
// process, for the demo, the benchmarks and the fault scenarios: one
// manager with its metrics and health endpoints off (several run in one
// process, one after the other), the API client optionally wrapped by a
// fault script, and a Stop that drops everything in memory, the
// connection pool included, as a crash would. Each Start dials its own
// connections to the apiservers (client-go would otherwise share one
// pooled transport among them) and Stop closes them, so an operator
// started again meets the apiservers as a new process does.
package operator
