// Package pgserver starts a throwaway PostgreSQL server from an installed
// PostgreSQL (Debian's postgresql package, or initdb and postgres on PATH):
// initdb into a temporary directory, a server on 127.0.0.1 and a free port
// with password (SCRAM) authentication, and an admin DSN for pgx v5. Stop
// removes everything. Options.TLS serves TLS with a certificate a test's
// own CA (NewCA, CA.Issue) signed, so clients can verify the server
// (sslmode=verify-full, sslrootcert the CA).
//
// Use it in a test or a TestMain (testenv.Options.Postgres starts one with
// the control plane):
//
//	s, err := pgserver.Start(ctx, pgserver.Options{})
//	if err != nil {
//		return err // ErrNotInstalled says what to install
//	}
//	defer s.Stop()
//	conn, err := pgx.Connect(ctx, s.DSN())
//
// It installs nothing by itself: without a server it returns
// ErrNotInstalled, saying what to install. Options.Install asks it to run
// apt-get (as root) instead; finale's own tests do, and `make postgres`
// installs the package beforehand.
//
// When the process runs as root the server runs as the postgres user (which
// Debian's package creates), as PostgreSQL refuses root.
package pgserver
