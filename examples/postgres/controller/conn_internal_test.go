package controller

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// A Transport failure is handed to every dial of the same connection for
// the connect timeout, then forgotten; a success or another kind of
// failure forgets it at once; other connections are not affected.
func TestRecentFailures(t *testing.T) {
	refused := errors.New("connection refused")
	a, b := Key{Host: "a", Port: 5432}, Key{Host: "b", Port: 5432}
	type step struct {
		advance time.Duration
		put     *Key // with remember
		forget  *Key // a put that is not remembered
		getA    bool // want a's failure
		getB    bool
	}
	cases := map[string][]step{
		"fresh, then expired": {{put: &a, getA: true}, {advance: 9 * time.Second, getA: true}, {advance: time.Second}},
		"success forgets":     {{put: &a, getA: true}, {forget: &a}},
		"per connection":      {{put: &a, getA: true}, {put: &b, getA: true, getB: true}, {advance: 10 * time.Second}},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
			f := &recentFailures{clock: clk, keep: 10 * time.Second, last: map[Key]recentFailure{}}
			for i, s := range steps {
				clk.SetTime(clk.Now().Add(s.advance))
				if s.put != nil {
					f.put(*s.put, refused, true)
				}
				if s.forget != nil {
					f.put(*s.forget, nil, false)
				}
				got := []bool{errors.Is(f.get(a), refused), errors.Is(f.get(b), refused)}
				if diff := cmp.Diff([]bool{s.getA, s.getB}, got); diff != "" {
					t.Errorf("step %d: remembered failures of a, b (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}
