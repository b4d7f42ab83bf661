package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/check"
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
	}{
		"no file":        {args: nil, want: []string{"-f is required"}},
		"bad output":     {args: []string{"-f", bad, "-o", "yaml"}, want: []string{`"yaml"`}},
		"bad report":     {args: []string{"-f", bad, "--report", "r.pdf"}, want: []string{"r.pdf", ".md or .html"}},
		"negative runs":  {args: []string{"-f", bad, "--runs", "-1"}, want: []string{"--runs -1"}},
		"extra argument": {args: []string{"-f", bad, "now"}, want: []string{`"now"`}},
		"missing file":   {args: []string{"-f", filepath.Join(dir, "none.yaml")}, want: []string{"none.yaml"}},
		"bad file":       {args: []string{"-f", bad}, want: []string{`unknown field "operator.comand"`}},
		"help":           {args: []string{"-h"}},
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
			if exitCode(err) != exitError {
				t.Errorf("check(%q) exits %d, want %d: it could not run", tc.args, exitCode(err), exitError)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("check(%q) = %v, want it to mention %s", tc.args, err, w)
				}
			}
		})
	}
	if diff := cmp.Diff(exitFindings, exitCode(fmt.Errorf("%w: order-all-at-once", errViolation))); diff != "" {
		t.Errorf("a broken experiment's exit status (-want +got):\n%s", diff)
	}
	if errors.Is(errViolation, errFindings) {
		t.Error("a broken experiment is its own error, not the audit's findings")
	}
}
