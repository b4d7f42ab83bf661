package model

import (
	"fmt"
	"strings"
)

// Walk is one run of a system driven by a chooser: a phase with faults,
// then a fair phase without them until nothing is left to do. It is the
// randomized counterpart of Explore for worlds too large to enumerate
// (rapid draws the choices and shrinks a failing run).
type Walk[S comparable] struct {
	Sys System[S]
	// Choose picks one of n steps; label names the decision for the
	// chooser's record.
	Choose func(n int, label string) int
	// FaultSteps is the length of the first phase; HealSteps bounds the
	// second.
	FaultSteps, HealSteps int
}

type move[S comparable] struct {
	st Step
	to S
}

// Run walks once and returns the violation found (safety in any state, or
// an obligation still open when the fair phase can do nothing more or
// runs out of steps), with the steps taken; "" when none.
func (w Walk[S]) Run() (string, []string) {
	init := w.Sys.Init()
	s := init[w.Choose(len(init), "init")]
	var log []string
	var moves []move[S]
	collect := func(healed bool) {
		moves = moves[:0]
		w.Sys.Next(s, func(st Step, t S) {
			if t == s || healed && (st.Fault || !w.Sys.Fair(st.Actor)) {
				return
			}
			moves = append(moves, move[S]{st, t})
		})
	}
	take := func(m move[S]) string {
		s = m.to
		mark := ""
		if m.st.Fault {
			mark = "!"
		}
		log = append(log, fmt.Sprintf("%s%s: %s\n      %s", mark, w.Sys.Actor(m.st.Actor), w.Sys.Label(m.st), w.Sys.Describe(s)))
		if v := w.Sys.Safety(s); len(v) > 0 {
			return strings.Join(v, "; ")
		}
		return ""
	}
	for range w.FaultSteps {
		collect(false)
		if len(moves) == 0 {
			break
		}
		if v := take(moves[w.Choose(len(moves), "step")]); v != "" {
			return v, log
		}
	}
	// Faults stop. A fair scheduler: the actor that waited longest goes
	// next, with one of its steps.
	last := map[uint8]int{}
	for k := range w.HealSteps {
		collect(true)
		if len(moves) == 0 {
			break
		}
		pick := -1
		for j, m := range moves {
			if pick < 0 || last[m.st.Actor] < last[moves[pick].st.Actor] {
				pick = j
			}
		}
		actor := moves[pick].st.Actor
		var mine []move[S]
		for _, m := range moves {
			if m.st.Actor == actor {
				mine = append(mine, m)
			}
		}
		last[actor] = k + 1
		if v := take(mine[w.Choose(len(mine), "fair")]); v != "" {
			return v, log
		}
	}
	collect(true)
	if open := w.Sys.Pending(s); open != 0 {
		var names []string
		for b := 0; b < 64; b++ {
			if open&(1<<b) != 0 {
				names = append(names, w.Sys.Obligation(b))
			}
		}
		why := "nothing is left to do"
		if len(moves) > 0 {
			why = fmt.Sprintf("still busy after %d fair steps", w.HealSteps)
		}
		return fmt.Sprintf("liveness (%s): %s", why, strings.Join(names, "; ")), log
	}
	return "", log
}
