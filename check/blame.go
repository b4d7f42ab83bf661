package check

import (
	"fmt"
	"strings"
)

// notTheExperiments says why a broken run's failure is not the one its
// experiment puts in, or "" when it is (then the experiment's fix applies).
// The one case told apart: the deletion did not finish, every dependent is
// gone, and what kept the deletion is another object's finalizer (in the
// namespace, or a cluster-scoped object of the run). The experiment's
// fault (a frozen transport, a kill, an order) was survived by every
// cleanup it could touch; the object left waits on something no dependent
// holds any more, such as a finalizer each dependent keeps for another, or
// a release that waits for an event that never comes.
func notTheExperiments(res RunReport, dependents []Object) string {
	if len(res.LeftBehind) == 0 {
		return ""
	}
	for _, v := range res.Violations {
		if v.Invariant != Finished {
			return ""
		}
	}
	var held []string
	for _, o := range res.LeftBehind {
		for _, d := range dependents {
			if o.Kind == d.Kind && o.Name == d.Name {
				return ""
			}
		}
		if len(o.Finalizers) > 0 {
			held = append(held, fmt.Sprintf("%s %s (%s)", o.Kind, o.Name, strings.Join(o.Finalizers, ", ")))
		}
	}
	if len(held) == 0 {
		return ""
	}
	return fmt.Sprintf(blameLeftover, strings.Join(held, "; "))
}

const blameLeftover = "not this experiment's fault: every dependent was cleaned up and gone, and the deletion was kept by %s: " +
	"look at that object's own deletion (a finalizer its reconciler releases only when something no dependent holds any more happens, " +
	"or one each dependent keeps for another)"
