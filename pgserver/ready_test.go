package pgserver

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPIDFileReady(t *testing.T) {
	// Lines as PostgreSQL 17 writes them: pid, data directory, start time,
	// port, socket directory, listen address, shared memory key, status.
	head := "4242\n/tmp/data\n1764000000\n5432\n/tmp\n127.0.0.1\n  5432001    32768\n"
	for _, tc := range []struct {
		name string
		file string // "" writes no file
		want bool
	}{
		{name: "no file yet", want: false},
		{name: "starting", file: head + "starting\n", want: false},
		{name: "stopping", file: head + "stopping\n", want: false},
		{name: "ready, padded as written", file: head + "ready   \n", want: true},
		{name: "standby, left to psql", file: head + "standby \n", want: true},
		{name: "no status line, left to psql", file: head, want: true},
		{name: "a stale file of another pid", file: "17\n" + head[len("4242\n"):] + "ready   \n", want: false},
		{name: "empty", file: "\n", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "postmaster.pid")
			if tc.file != "" {
				if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := pidFileReady(path, 4242); got != tc.want {
				t.Errorf("pidFileReady(%q) = %v, want %v", tc.file, got, tc.want)
			}
		})
	}
}
