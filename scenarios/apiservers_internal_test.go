package scenarios

import (
	"slices"
	"testing"

	"github.com/finale-dev/finale/internal/testenv"
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

// A run starts on a healed world whatever the run before it left: in the
// first 1,000-run campaign a run that ended early (seed 528) left its
// world's apiserver cut off from etcd, and every later run on that world
// failed.
func TestRunStartsOnAHealedWorld(t *testing.T) {
	t.Parallel()
	env := Env{ControlPlane: testenv.ControlPlane(t), Postgres: testenv.Postgres(t)}
	w, err := newWorld(t.Context(), env, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if err := w.addAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.apiB.EtcdLink.Partition(true) // what the run that ended early left
	var r Result
	if err := w.campaignRun(t.Context(), []step{{kind: StepCreateRole}, {kind: StepAPIPartition}}, &r); err != nil {
		t.Fatalf("run on the world left partitioned: %v", err)
	}
	if len(r.Violations) > 0 {
		t.Errorf("violations: %v", r.Violations)
	}
	if w.apiB.EtcdLink.Partitioned() {
		t.Error("the run left its world partitioned")
	}
}
