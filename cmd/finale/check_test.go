package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/check"
	"github.com/finale-dev/finale/internal/exitcode"
)

// The command refuses what it cannot run before anything starts, and a
// broken experiment is exit status 2.
func TestCheckArguments(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("operator:\n  comand: [x]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		want []string
		code int
	}{
		"no file":            {args: nil, want: []string{"-f is required"}, code: exitcode.Usage},
		"bad output":         {args: []string{"-f", bad, "-o", "yaml"}, want: []string{`"yaml"`}, code: exitcode.Usage},
		"bad report":         {args: []string{"-f", bad, "--report", "r.pdf"}, want: []string{"r.pdf", ".md or .html"}, code: exitcode.Usage},
		"negative runs":      {args: []string{"-f", bad, "--runs", "-1"}, want: []string{"--runs -1"}, code: exitcode.Usage},
		"zero lanes":         {args: []string{"-f", bad, "--lanes", "0"}, want: []string{"--lanes 0"}, code: exitcode.Usage},
		"extra argument":     {args: []string{"-f", bad, "now"}, want: []string{`"now"`, "finale check takes only flags"}, code: exitcode.Usage},
		"unknown flag":       {args: []string{"-f", bad, "--quik"}, want: []string{"-quik", "finale help check"}, code: exitcode.Usage},
		"missing file":       {args: []string{"-f", filepath.Join(dir, "none.yaml")}, want: []string{"none.yaml"}, code: exitcode.BadDescription},
		"bad file":           {args: []string{"-f", bad}, want: []string{`unknown field "operator.comand"`}, code: exitcode.BadDescription},
		"bad file, validate": {args: []string{"-f", bad, "--validate"}, want: []string{`unknown field "operator.comand"`}, code: exitcode.BadDescription},
		"help":               {args: []string{"-h"}},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := runCheck(t.Context(), tc.args, &out)
			if tc.want == nil {
				if err != nil || !strings.Contains(out.String(), "usage: finale check") || !strings.Contains(out.String(), check.KillDuringCreates) {
					t.Errorf("check(%q) = %v, want nil and the usage naming the experiments:\n%s", tc.args, err, out.String())
				}
				return
			}
			if err == nil {
				t.Fatalf("check(%q) succeeded", tc.args)
			}
			if exitCode(err) != tc.code {
				t.Errorf("check(%q) = %v: exits %d, want %d", tc.args, err, exitCode(err), tc.code)
			}
			if out.Len() > 0 {
				t.Errorf("check(%q) wrote to stdout, want only the error:\n%s", tc.args, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("check(%q) = %v, want it to mention %s", tc.args, err, w)
				}
			}
		})
	}
	if diff := cmp.Diff(exitFindings, exitCode(brokenErr([]string{"order-all-at-once"}))); diff != "" {
		t.Errorf("a broken experiment's exit status (-want +got):\n%s", diff)
	}
	if errors.Is(errViolation, errFindings) {
		t.Error("a broken experiment is its own error, not the audit's findings")
	}
}
