package scenarios

import (
	"slices"
	"testing"
)

// With APIServers the schedules draw the apiserver kinds too, and without
// it exactly what they drew before (earlier seeds replay unchanged).
func TestScheduleAPIServerKinds(t *testing.T) {
	kinds := append(slices.Clone(stepKinds), apiserverKinds...)
	seen := map[string]bool{}
	for seed := range int64(50) {
		for _, s := range scheduleOf(seed, DefaultSteps, kinds) {
			seen[s.kind] = true
			if s.kind == StepAPILag && (s.arg < 100 || s.arg > 10_000) {
				t.Errorf("seed %d: lag %d ms, want 100 to 10000", seed, s.arg)
			}
		}
		for _, s := range schedule(seed, DefaultSteps) {
			if slices.Contains(apiserverKinds, s.kind) {
				t.Fatalf("seed %d: the default schedule drew %s", seed, s.kind)
			}
		}
	}
	for _, k := range apiserverKinds {
		if !seen[k] {
			t.Errorf("%s never drawn in 50 schedules", k)
		}
	}
}
