package pgtarget

import (
	"testing"

	"github.com/finale-dev/finale/pgserver"
)

// Fresh creates a new database on s (so a new sentinel, hence a new
// deployment; roles are server-wide and shared) and returns its DSN and a
// Target on it, closed when the test ends.
func Fresh(t testing.TB, s *pgserver.Server) (*Target, string) {
	t.Helper()
	admin, err := Open(t.Context(), s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	db := RandomName("deployment_")
	if err := admin.Exec(t.Context(), `CREATE DATABASE `+db); err != nil {
		t.Fatalf("create database %s: %v", db, err)
	}
	dsn := s.DSNVia(s.Addr(), db)
	tg, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	return tg, dsn
}
