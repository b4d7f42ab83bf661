package hold

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	end := t0.Add(DefaultTimeout)
	const recheck = 30 * time.Second
	type in struct {
		o      observation
		policy AccessPolicy
	}
	cases := map[string]struct {
		in   in
		want verdict
	}{
		"alive with dependents keeps the hold": {
			in:   in{o: observation{Dependents: 3}},
			want: verdict{Action: actKeep},
		},
		"alive without dependents drops the hold": {
			in:   in{o: observation{}},
			want: verdict{Action: actDrop},
		},
		"deleting without dependents releases at once": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end}},
			want: verdict{Action: actRelease, Reason: ReleasedDependentsDone},
		},
		"deleting with dependents holds, rechecking": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1}},
			want: verdict{Action: actHold, After: recheck},
		},
		"near the end looks again exactly at the end": {
			in:   in{o: observation{Deleting: true, Now: end.Add(-time.Second), End: end, Dependents: 1}},
			want: verdict{Action: actHold, After: time.Second},
		},
		"at the end releases on timeout": {
			in:   in{o: observation{Deleting: true, Now: end, End: end, Dependents: 1, AccessChecked: true, AccessReady: true}},
			want: verdict{Action: actRelease, Reason: ReleasedTimeout},
		},
		"access not ready keeps holding under RepairDuringHold": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, AccessChecked: true}},
			want: verdict{Action: actHold, After: recheck},
		},
		"access still not ready at the end releases as access_not_ready": {
			in:   in{o: observation{Deleting: true, Now: end.Add(time.Minute), End: end, Dependents: 1, AccessChecked: true}},
			want: verdict{Action: actRelease, Reason: ReleasedAccessNotReady},
		},
		"access not ready releases at once under SkipHold": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, AccessChecked: true}, policy: SkipHold},
			want: verdict{Action: actRelease, Reason: ReleasedAccessNotReady},
		},
		"access ready holds under SkipHold": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, AccessChecked: true, AccessReady: true}, policy: SkipHold},
			want: verdict{Action: actHold, After: recheck},
		},
		"foreground marker gone and owned gone releases": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, OwnedChecked: true}},
			want: verdict{Action: actRelease, Reason: ReleasedOwnedGone},
		},
		"foreground marker gone and owned there holds": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, OwnedChecked: true, OwnedExists: true}},
			want: verdict{Action: actHold, After: recheck},
		},
		"foreground marker present waits for the garbage collector": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, ForegroundMarker: true, OwnedChecked: true}},
			want: verdict{Action: actHold, After: recheck},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := decide(tc.in.o, tc.in.policy, recheck)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decide (-want +got):\n%s", diff)
			}
		})
	}
}
