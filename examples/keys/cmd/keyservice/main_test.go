package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/examples/keys/keyclient"
	"github.com/finale-dev/finale/examples/keys/service"
)

// The command serves on loopback with the token from a file, answers
// calls, and stops when its context ends.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("cmd-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-dir", filepath.Join(dir, "data"), "-token-file", tokenFile}, func(string) string { return "" }, pw)
		_ = pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("read the serving line: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url := strings.Fields(line)[1]
	c, err := keyclient.New(url, "cmd-token-0123456789", keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Create(t.Context(), "t", service.KeySpec{Name: "x"}); err != nil {
		t.Fatalf("create through the command's service: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	env := func(string) string { return "cmd-token-0123456789" }
	for name, tc := range map[string]struct {
		args   []string
		getenv func(string) string
		says   string
	}{
		"not loopback": {args: []string{"-listen", "0.0.0.0:0", "-dir", dir}, getenv: env, says: "loopback only"},
		"no token":     {args: []string{"-listen", "127.0.0.1:0", "-dir", dir}, getenv: func(string) string { return "" }, says: "no bearer token"},
		"no dir":       {args: []string{"-listen", "127.0.0.1:0"}, getenv: env, says: "Dir is required"},
		"unknown mode": {args: []string{"-listen", "127.0.0.1:0", "-dir", dir, "-mode", "seed"}, getenv: env, says: "unknown mode"},
	} {
		t.Run(name, func(t *testing.T) {
			err := run(t.Context(), tc.args, tc.getenv, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("run = %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

// -list prints every key of the data directory, by ID, and serves nothing.
func TestRunList(t *testing.T) {
	dir := t.TempDir()
	s, err := service.Start("127.0.0.1:0", service.Options{Token: "list-token-0123456789", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := keyclient.New(s.URL, "list-token-0123456789", keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var want []string
	for _, tag := range []string{"finale:apikey:a", "other"} {
		k, err := c.Create(t.Context(), tag, service.KeySpec{Name: "x"})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, k.ID+" "+tag)
	}
	slices.Sort(want)
	var out strings.Builder
	if err := run(t.Context(), []string{"-list", "-dir", dir}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-list (-want +got):\n%s", diff)
	}
}
