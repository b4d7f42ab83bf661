package check

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// The early-end rule: a wait ends before its bound only once the run's
// fingerprint stayed the same for the whole window; a change or a failed
// look starts the window again.
func TestStillness(t *testing.T) {
	errLook := errors.New("list failed")
	type look struct {
		after time.Duration // since the previous look
		fp    string
		err   error
	}
	for name, tc := range map[string]struct {
		looks []look
		want  []bool
	}{
		"the first look never ends a wait": {
			looks: []look{{0, "a", nil}},
			want:  []bool{false},
		},
		"the same for the window ends it": {
			looks: []look{{0, "a", nil}, {20 * time.Second, "a", nil}, {10 * time.Second, "a", nil}},
			want:  []bool{false, false, true},
		},
		"just short of the window does not": {
			looks: []look{{0, "a", nil}, {30*time.Second - time.Millisecond, "a", nil}},
			want:  []bool{false, false},
		},
		"a change starts the window again": {
			looks: []look{{0, "a", nil}, {25 * time.Second, "b", nil}, {25 * time.Second, "b", nil}, {5 * time.Second, "b", nil}},
			want:  []bool{false, false, false, true},
		},
		"a change back is a change": {
			looks: []look{{0, "a", nil}, {20 * time.Second, "b", nil}, {20 * time.Second, "a", nil}, {20 * time.Second, "a", nil}},
			want:  []bool{false, false, false, false},
		},
		"a failed look is a doubt: the window starts again after it": {
			looks: []look{{0, "a", nil}, {29 * time.Second, "", errLook}, {2 * time.Second, "a", nil}, {29 * time.Second, "a", nil}, {time.Second, "a", nil}},
			want:  []bool{false, false, false, false, true},
		},
		"still past the window stays still": {
			looks: []look{{0, "a", nil}, {time.Minute, "a", nil}, {time.Second, "a", nil}},
			want:  []bool{false, true, true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
			s := newStillness(clk, 30*time.Second)
			var got []bool
			for _, l := range tc.looks {
				clk.SetTime(clk.Now().Add(l.after))
				got = append(got, s.look(l.fp, l.err))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("still (-want +got):\n%s", diff)
			}
		})
	}
}

// The window: timeouts.stuck (30s unset), never shorter than a hold with
// operator-down's margin.
func TestStuckWindow(t *testing.T) {
	for name, tc := range map[string]struct {
		stuck, hold time.Duration
		want        time.Duration
	}{
		"default":                      {want: DefaultStuck},
		"set":                          {stuck: 10 * time.Second, want: 10 * time.Second},
		"a short hold changes nothing": {hold: 10 * time.Second, want: DefaultStuck},
		"a long hold lengthens it":     {stuck: 10 * time.Second, hold: time.Minute, want: downFor(time.Minute)},
	} {
		t.Run(name, func(t *testing.T) {
			s := &Spec{}
			s.Timeouts.Stuck.Duration, s.Timeouts.Hold.Duration = tc.stuck, tc.hold
			if got := s.stuckWindow(); got != tc.want {
				t.Errorf("stuckWindow = %s, want %s", got, tc.want)
			}
		})
	}
}

// A wait's every call does work of its own (the ready check, the probe,
// a listing) before it asks whether the run is still, and each look takes
// a while; the looks stay on a 2 s grid, so a run still from its first
// look ends within a call of its window's end. A grid counted from each
// look's start lost up to a call at every look, seconds over a window.
func TestStuckLooksKeepTheirGrid(t *testing.T) {
	const (
		call     = 450 * time.Millisecond // the wait's own work and its tick
		lookTime = 250 * time.Millisecond
		window   = 30 * time.Second
	)
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	looks := 0
	w := &stuckWatch{s: newStillness(clk, window), look: func(context.Context) (string, error) {
		looks++
		clk.SetTime(clk.Now().Add(lookTime))
		return "still", nil
	}}
	start := clk.Now()
	for {
		if err := w.stuck(t.Context()); errors.Is(err, errStuck) {
			break
		}
		if clk.Now().Sub(start) > 2*window {
			t.Fatalf("not still after %s", clk.Now().Sub(start))
		}
		clk.SetTime(clk.Now().Add(call))
	}
	if took, most := clk.Now().Sub(start), window+call+lookTime; took > most {
		t.Errorf("a run still from its first look ended after %s (%d looks); want at most %s", took, looks, most)
	}
}
