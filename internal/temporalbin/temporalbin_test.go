package temporalbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDirHonoursEnv(t *testing.T) {
	d := t.TempDir()
	t.Setenv(EnvDir, d)
	got, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	if got != d {
		t.Fatalf("Dir() = %q, want %q", got, d)
	}
}

func fakeBinDir(t *testing.T, script string) string {
	t.Helper()
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, Binary), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestStartReportsLogTail(t *testing.T) {
	cases := map[string]struct {
		script, want string
	}{
		"exits before ready": {
			script: "echo 'bind: address already in use' >&2\nexit 3\n",
			want:   "exited before it was ready (exit status 3); last lines of",
		},
		"ready line without address": {
			script: "echo 'FINALE_TEMPORAL_READY {}'\nsleep 60\n",
			want:   "ready line without frontend or namespace",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Start(t.Context(), Options{BinDir: fakeBinDir(t, tc.script)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error containing %q", err, tc.want)
			}
			if name == "exits before ready" && !strings.Contains(err.Error(), "address already in use") {
				t.Errorf("the error lacks the log tail: %v", err)
			}
		})
	}
}

func TestStartRejectsNegativeTTL(t *testing.T) {
	if _, err := Start(t.Context(), Options{PollerHistoryTTL: -time.Second}); err == nil {
		t.Fatal("Start accepted a negative PollerHistoryTTL")
	}
}
