package model_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"pgregory.net/rapid"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/internal/model"
)

// hold logs what it events; the model's tables run it thousands of times.
func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	m.Run()
}

// The CI-sized suite: the protocol (the target rules, with the two the
// model found) holds every invariant in every state and every fair run once
// faults stop, in the small worlds explored exhaustively; each naive
// variant, each finding and each pre-issue-12/13 defect produces its
// counterexample.
func TestSuite(t *testing.T) {
	var outs []model.Outcome
	for _, c := range model.Suite(false) {
		o := model.Check(t.Context(), c, 2_000_000, nil)
		outs = append(outs, o)
		if !o.OK() {
			var b bytes.Buffer
			o.Trace.Format(&b)
			t.Errorf("%s: want %q, got %v (err %v)\n%s", c.Name, c.Expect, o.Trace != nil, o.Err, b.String())
		}
	}
	var b bytes.Buffer
	model.Report(&b, outs)
	t.Logf("\n%s", b.String())
}

// drawG2 draws a world larger than the exhaustive ones: up to two parents
// and four dependents, some created late, Retain, two-step creates,
// foreign names, a tenant's copy, an admin connection, finalizers removed
// by hand.
func drawG2(t *rapid.T) model.G2Config {
	deps := rapid.IntRange(2, model.MaxDeps).Draw(t, "dependents")
	return model.G2Config{
		Parents:    rapid.IntRange(1, model.MaxParents).Draw(t, "parents"),
		Dependents: deps,
		Late:       rapid.IntRange(0, deps-1).Draw(t, "late"),
		Retain:     uint8(rapid.IntRange(0, 1<<deps-1).Draw(t, "retain")),
		TwoStep:    rapid.Bool().Draw(t, "twoStep"),
		Foreign:    rapid.Bool().Draw(t, "foreign"),
		Copy:       rapid.Bool().Draw(t, "copy"),
		Admin:      rapid.Bool().Draw(t, "admin"),
		ByHand:     rapid.Bool().Draw(t, "byHand"),
		Faults:     model.AllFaults(),
		Rules:      model.Target(),
	}
}

func walk[S comparable](t *rapid.T, sys model.System[S]) {
	w := model.Walk[S]{
		Sys:        sys,
		Choose:     func(n int, label string) int { return rapid.IntRange(0, n-1).Draw(t, label) },
		FaultSteps: rapid.IntRange(0, 60).Draw(t, "faultSteps"),
		HealSteps:  3000,
	}
	if v, log := w.Run(); v != "" {
		t.Fatalf("%s\n  %s", v, strings.Join(log, "\n  "))
	}
}

// Randomized state-machine testing of larger cleanup worlds: a faulty
// phase of random steps, then a fair phase without faults; safety in every
// state, and every deletion finished and every orphan swept at the end.
func TestRandomCleanup(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sys, err := model.NewG2(drawG2(t))
		if err != nil {
			t.Fatal(err)
		}
		walk[model.G2](t, sys)
	})
}

// The same for capture worlds of up to two owners with two children each.
func TestRandomCapture(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sys, err := model.NewG3(model.G3Config{
			Owners:   rapid.IntRange(1, model.MaxOwners).Draw(t, "owners"),
			Children: rapid.IntRange(1, model.MaxChildren).Draw(t, "children"),
			Faults:   model.AllFaults(),
			Rules:    model.Target(),
		})
		if err != nil {
			t.Fatal(err)
		}
		walk[model.G3](t, sys)
	})
}

// The randomized walk has teeth: with the hold off it finds a stranded
// dependent in larger worlds too.
func TestRandomFindsNaive(t *testing.T) {
	found := false
	for seed := range 200 {
		cfg := model.G2Config{Parents: 2, Dependents: 4, Late: 1, Faults: model.Faults{Crash: true}, Rules: model.Target()}
		cfg.Rules.Hold = false
		sys, _ := model.NewG2(cfg)
		n := uint64(seed)*2654435761 + 1
		w := model.Walk[model.G2]{Sys: sys, FaultSteps: 60, HealSteps: 3000, Choose: func(k int, _ string) int {
			n = n*6364136223846793005 + 1442695040888963407
			return int((n >> 33) % uint64(k))
		}}
		if v, _ := w.Run(); strings.Contains(v, "orphaned") {
			found = true
			break
		}
	}
	if !found {
		t.Fatal("200 random walks without the hold found no stranded dependent")
	}
}
