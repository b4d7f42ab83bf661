// Package pgserver starts a throwaway PostgreSQL server from Debian's
// postgresql package: initdb into a temporary directory, a server on
// 127.0.0.1 and a free port with password (SCRAM) authentication, and an
// admin DSN for pgx v5. Stop removes everything.
//
// When the process runs as root the server runs as the postgres user, as
// PostgreSQL refuses root. When the binaries are missing and the process is
// root, Start installs the package with apt-get (Options.NoInstall turns that
// off), so a test that needs a server gets one rather than skipping.
package pgserver
