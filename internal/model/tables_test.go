package model

import "testing"

// The tables are hold's own answers; these are the ones its doc promises,
// so a change in hold that breaks a promise shows here as well as in the
// model's verdicts.
func TestTablesAreHolds(t *testing.T) {
	h := theHold
	for name, tc := range map[string]struct {
		p, s version
		at   holdTime
		deps []version
		want holdAnswer
	}{
		"alive parent with a dependent: held, Secret first":  {vAlive, vAlive, htRunning, []version{vAlive}, holdAnswer{PFin: true, SFin: true}},
		"alive parent without dependents: never held":        {vAliveFin, vAliveFin, htRunning, []version{vGone}, holdAnswer{PFin: false, SFin: true}},
		"deleting, a dependent still cleaning up: held":      {vDeleting, vAliveFin, htRunning, []version{vDeleting}, holdAnswer{PFin: true, SFin: true, Started: true}},
		"deleting, the dependent without its finalizer":      {vDeleting, vAliveFin, htRunning, []version{vAlive}, holdAnswer{PFin: false, SFin: true}},
		"deleting, hold timed out: released":                 {vDeleting, vAliveFin, htOver, []version{vDeleting}, holdAnswer{PFin: false, SFin: true}},
		"deleting, first look after an outage: held, starts": {vDeleting, vAliveFin, htUnstarted, []version{vDeleting}, holdAnswer{PFin: true, SFin: true, Started: true}},
	} {
		if got := h.Parent(tc.p, tc.s, tc.at, tc.deps); got != tc.want {
			t.Errorf("%s: parent reconciler leaves %+v, want %+v", name, got, tc.want)
		}
	}
	if !h.Secret(vAliveFin, vAliveFin, []version{vAliveFin}) {
		t.Error("the Secret of a held parent lost its hold")
	}
	if h.Secret(vAlive, vAliveFin, []version{vGone}) {
		t.Error("the Secret of a parent nobody needs kept its hold")
	}
	for name, tc := range map[string]struct {
		p                   version
		at                  holdTime
		wantHeld, wantRelse bool
	}{
		"held parent":                                {vAliveFin, htRunning, true, false},
		"parent not yet held":                        {vAlive, htRunning, false, false},
		"deleting, within the hold":                  {vDeleting, htRunning, false, false},
		"deleting, hold timed out":                   {vDeleting, htOver, false, true},
		"deleting, hold not started after an outage": {vDeleting, htUnstarted, false, false},
		"parent gone":                                {vGone, htRunning, false, true},
	} {
		held, release := h.Dependent(tc.p, tc.at)
		if held != tc.wantHeld || release != tc.wantRelse {
			t.Errorf("%s: Held %v, release without delete %v; want %v, %v", name, held, release, tc.wantHeld, tc.wantRelse)
		}
	}
}
