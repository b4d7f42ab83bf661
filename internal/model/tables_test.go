package model

import "testing"

// The tables are hold's own answers; these are the ones its doc promises,
// so a change in hold that breaks a promise shows here as well as in the
// model's verdicts.
func TestTablesAreHolds(t *testing.T) {
	h := theHold
	for name, tc := range map[string]struct {
		p, s     version
		timedOut bool
		deps     []version
		want     holdAnswer
	}{
		"alive parent with a dependent: held, Secret first": {vAlive, vAlive, false, []version{vAlive}, holdAnswer{PFin: true, SFin: true}},
		"alive parent without dependents: never held":       {vAliveFin, vAliveFin, false, []version{vGone}, holdAnswer{PFin: false, SFin: true}},
		"deleting, a dependent still cleaning up: held":     {vDeleting, vAliveFin, false, []version{vDeleting}, holdAnswer{PFin: true, SFin: true}},
		"deleting, the dependent without its finalizer":     {vDeleting, vAliveFin, false, []version{vAlive}, holdAnswer{PFin: false, SFin: true}},
		"deleting, hold timed out: released":                {vDeleting, vAliveFin, true, []version{vDeleting}, holdAnswer{PFin: false, SFin: true}},
	} {
		if got := h.Parent(tc.p, tc.s, tc.timedOut, tc.deps); got != tc.want {
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
		timedOut            bool
		wantHeld, wantRelse bool
	}{
		"held parent":               {vAliveFin, false, true, false},
		"parent not yet held":       {vAlive, false, false, false},
		"deleting, within the hold": {vDeleting, false, false, false},
		"deleting, hold timed out":  {vDeleting, true, false, true},
		"parent gone":               {vGone, false, false, true},
	} {
		held, release := h.Dependent(tc.p, tc.timedOut)
		if held != tc.wantHeld || release != tc.wantRelse {
			t.Errorf("%s: Held %v, release without delete %v; want %v, %v", name, held, release, tc.wantHeld, tc.wantRelse)
		}
	}
}
