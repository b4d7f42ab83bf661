package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/internal/exitcode"
)

// TestExitCodes: finale-lab exits with finale's table (internal/exitcode):
// a wrong command line is 64, invariants not as expected 2, help 0; none
// of these starts anything.
func TestExitCodes(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want int
	}{
		"help":            {[]string{"help"}, exitcode.OK},
		"demo -h":         {[]string{"demo", "-h"}, exitcode.OK},
		"scenario -h":     {[]string{"scenario", "campaign", "-h"}, exitcode.OK},
		"no command":      {nil, exitcode.Usage},
		"unknown command": {[]string{"nope"}, exitcode.Usage},
		"demo bad flag":   {[]string{"demo", "--no-such-flag"}, exitcode.Usage},
		"demo extra":      {[]string{"demo", "now"}, exitcode.Usage},
		"bench extra":     {[]string{"bench", "now"}, exitcode.Usage},
		"bench no roles":  {[]string{"bench", "-roles", "0"}, exitcode.Usage},
		"no scenario":     {[]string{"scenario"}, exitcode.Usage},
		"unknown name":    {[]string{"scenario", "no-such-scenario"}, exitcode.Usage},
		"bad flag":        {[]string{"scenario", "campaign", "--no-such-flag"}, exitcode.Usage},
		"bad election":    {[]string{"scenario", "failover", "--election", "slow"}, exitcode.Usage},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(t.Context(), tc.args, &out)
			if diff := cmp.Diff(tc.want, exitcode.Of(err)); diff != "" {
				t.Errorf("finale-lab %q = %v: exit status (-want +got):\n%s", tc.args, err, diff)
			}
		})
	}
	if diff := cmp.Diff(exitcode.Violation, exitcode.Of(fmt.Errorf("campaign: %w", errInvariants))); diff != "" {
		t.Errorf("invariants not as expected: exit status (-want +got):\n%s", diff)
	}
}
