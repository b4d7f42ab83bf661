// Package stacktest holds the library packages' tests that need a real
// PostgreSQL through pgx (as the reference operator's external service):
// one directory per library package (clientpool, errclass, hold, ledger,
// lifecycle, pgserver, sweep), each a test-only package of that package's
// external tests. They live in the examples/postgres module because the
// library module must not require pgx; make test runs them with the rest.
package stacktest
