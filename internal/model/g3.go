package model

import (
	"fmt"
	"strings"

	"github.com/finale-dev/finale/capture"
)

// Sizes of a capture world.
const (
	MaxOwners   = 2
	MaxChildren = 2 // per owner
)

// G3Config is one capture world: owners (workflows) whose children (Pods)
// carry the capture finalizer from their creation, the owner's controller
// recording each child's result, capture's release path, the garbage
// collector and the namespace controller.
type G3Config struct {
	Owners, Children int // children per owner
	Faults           Faults
	Rules            Rules
}

// G3 is one state of a capture world.
type G3 struct {
	NS uint8
	// W: vAlive, vDeleting (a foreground delete: foregroundDeletion keeps
	// it while the collector deletes its children), vGone.
	W         [MaxOwners]object
	Recorded  [MaxOwners]uint8 // bit c: the owner's status has child c's result
	Cancelled uint8            // bit w: the owner was cancelled (needs no results)
	C         [MaxOwners * MaxChildren]object
	Terminal  uint8 // bit: the child finished (Succeeded or Failed)
	Timer     uint8 // bit: upstream's timer fired for the child (naive only)
	Lost      uint8 // bit: a child went while its active owner lacked its result
}

// G3System explores a G3Config.
type G3System struct{ cfg G3Config }

// NewG3 checks cfg.
func NewG3(cfg G3Config) (*G3System, error) {
	if cfg.Owners < 1 || cfg.Owners > MaxOwners || cfg.Children < 1 || cfg.Children > MaxChildren {
		return nil, fmt.Errorf("model: %d owners of %d children; want 1 to %d of 1 to %d", cfg.Owners, cfg.Children, MaxOwners, MaxChildren)
	}
	return &G3System{cfg: cfg}, nil
}

func (m *G3System) n() int { return m.cfg.Owners * m.cfg.Children }

func (m *G3System) owner(c int) int { return c / m.cfg.Children }

func (m *G3System) slot(c int) uint8 { return 1 << (c % m.cfg.Children) }

// Init: running children, each carrying the capture finalizer (placed
// before the create, capture.Place).
func (m *G3System) Init() []G3 {
	var s G3
	for w := range m.cfg.Owners {
		s.W[w] = newObject(vAlive)
	}
	for c := range m.n() {
		s.C[c] = newObject(vAliveFin)
	}
	m.norm(&s)
	return []G3{s}
}

func (m *G3System) norm(s *G3) {
	if !m.cfg.Faults.Stale {
		for c := range s.C {
			s.C[c].Hist = 0
		}
		for w := range s.W {
			s.W[w].Hist = 0
		}
	}
}

// G3 actors.
const (
	g3User uint8 = iota
	g3NS
	g3GC
	g3Kubelet
	g3Clock
	g3Owner   // + w: the owner's controller
	g3Release = g3Owner + MaxOwners
	g3Count   = g3Release + MaxOwners*MaxChildren
)

// G3 step kinds.
const (
	gDeleteChild = iota + 1
	gDeleteOwner
	gDeleteOwnerFg
	gCancel
	gDeleteNS
	gNSDelete
	gGCDelete
	gGCRelease
	gFinish
	gTimer
	gRecord
	gRelease
	gPersist
	gTimerRelease
)

func (m *G3System) ownerDone(s G3, w int) bool {
	all := uint8(1)<<m.cfg.Children - 1
	return s.Cancelled&(1<<w) != 0 || s.Recorded[w] == all
}

// Next generates every step.
func (m *G3System) Next(s G3, emit0 func(Step, G3)) {
	emit := func(st Step, t G3) {
		m.norm(&t)
		for c := range m.n() {
			if s.C[c].V.exists() && t.C[c].V == vGone {
				w := m.owner(c)
				if t.W[w].V == vAlive && t.Recorded[w]&m.slot(c) == 0 && !m.ownerDone(t, w) {
					t.Lost |= 1 << c
				}
			}
		}
		emit0(st, t)
	}
	e := func(a uint8, kind, arg int, t G3) { emit(Step{Actor: a, Code: code(a, kind, arg)}, t) }
	// Users.
	for c := range m.n() {
		if v := s.C[c].V; v == vAlive || v == vAliveFin {
			t := s
			t.C[c].del()
			e(g3User, gDeleteChild, c, t)
		}
	}
	for w := range m.cfg.Owners {
		if s.W[w].V == vAlive {
			t := s
			t.W[w].set(vGone)
			e(g3User, gDeleteOwner, w, t)
			t = s
			t.W[w].set(vDeleting)
			e(g3User, gDeleteOwnerFg, w, t)
			if !m.ownerDone(s, w) {
				t = s
				t.Cancelled |= 1 << w
				e(g3User, gCancel, w, t)
			}
		}
	}
	if s.NS == 0 {
		t := s
		t.NS = 1
		e(g3User, gDeleteNS, 0, t)
	}
	// The namespace controller deletes everything, in any order (owners in
	// the background, as it does).
	if s.NS == 1 {
		for c := range m.n() {
			if v := s.C[c].V; v == vAlive || v == vAliveFin {
				t := s
				t.C[c].del()
				e(g3NS, gNSDelete, c, t)
			}
		}
		for w := range m.cfg.Owners {
			if s.W[w].V == vAlive {
				t := s
				t.W[w].set(vGone)
				e(g3NS, gNSDelete, 0x100|w, t)
			}
		}
	}
	// The garbage collector: children of a gone owner (background) or of a
	// foreground-deleting one are deleted; a foreground owner goes once its
	// children are gone.
	for w := range m.cfg.Owners {
		ow := s.W[w].V
		if ow != vGone && ow != vDeleting {
			continue
		}
		left := false
		for c := range m.n() {
			if m.owner(c) != w {
				continue
			}
			if v := s.C[c].V; v == vAlive || v == vAliveFin {
				t := s
				t.C[c].del()
				e(g3GC, gGCDelete, c, t)
			}
			left = left || s.C[c].V.exists()
		}
		if ow == vDeleting && !left {
			t := s
			t.W[w].set(vGone)
			e(g3GC, gGCRelease, w, t)
		}
	}
	// The kubelet: a Pod finishes, or is killed when deleted (Failed).
	for c := range m.n() {
		if s.C[c].V.exists() && s.Terminal&(1<<c) == 0 {
			t := s
			t.Terminal |= 1 << c
			e(g3Kubelet, gFinish, c, t)
		}
	}
	// Upstream's timer (the naive build only): it fires some time after
	// the child finished, whatever the owner persisted.
	if !m.cfg.Rules.CaptureRule {
		for c := range m.n() {
			if s.C[c].V.exists() && s.Terminal&(1<<c) != 0 && s.Timer&(1<<c) == 0 {
				t := s
				t.Timer |= 1 << c
				e(g3Clock, gTimer, c, t)
			}
		}
	}
	// The owner's controller records a finished child's result from its
	// cached copy of the child.
	for w := range m.cfg.Owners {
		if s.W[w].V != vAlive || m.ownerDone(s, w) {
			continue
		}
		for c := range m.n() {
			if m.owner(c) != w || s.Recorded[w]&m.slot(c) != 0 || s.Terminal&(1<<c) == 0 {
				continue
			}
			for _, v := range s.C[c].views(m.cfg.Faults.Stale) {
				if !v.exists() {
					continue // the cache shows no Pod: nothing to read (upstream: "pod deleted")
				}
				t := s
				t.Recorded[w] |= m.slot(c)
				emit(Step{Actor: g3Owner + uint8(w), Fault: v != s.C[c].V, Code: code(g3Owner+uint8(w), gRecord, c)}, t)
				break
			}
		}
	}
	// capture's release path, one child at a time: the owner read live,
	// capture.Rule decides.
	for c := range m.n() {
		if !s.C[c].V.fin() {
			continue
		}
		a := g3Release + uint8(c)
		w := m.owner(c)
		if !m.cfg.Rules.CaptureRule {
			if s.Timer&(1<<c) != 0 {
				t := s
				t.C[c].rmFin()
				e(a, gTimerRelease, c, t)
			}
			continue
		}
		f := capture.Facts{
			HasOwnerRef:     true,
			OwnerFound:      s.W[w].V.exists(),
			OwnerUIDMatches: s.W[w].V.exists(),
			OwnerDeleting:   s.W[w].V == vDeleting,
			OwnerFinished:   s.W[w].V.exists() && m.ownerDone(s, w),
			Recorded:        s.W[w].V.exists() && s.Recorded[w]&m.slot(c) != 0,
			ChildTerminal:   s.Terminal&(1<<c) != 0,
			ChildDeleting:   s.C[c].V == vDeleting,
		}
		switch capture.Rule(f).Action {
		case capture.Release:
			t := s
			t.C[c].rmFin()
			e(a, gRelease, c, t)
		case capture.Persist:
			// One status update with this child's result and those of its
			// siblings in the same state; the finalizer goes on the next
			// pass, which sees the result recorded.
			t := s
			for k := range m.n() {
				if m.owner(k) == w && s.C[k].V == vDeleting && s.Terminal&(1<<k) != 0 {
					t.Recorded[w] |= m.slot(k)
				}
			}
			e(a, gPersist, c, t)
		}
	}
}

// Safety: no lost result.
func (m *G3System) Safety(s G3) []string {
	var out []string
	for c := range m.n() {
		if s.Lost&(1<<c) != 0 {
			out = append(out, fmt.Sprintf("no-lost-result: C%d went while its owner W%d was active and had not recorded its result", c, m.owner(c)))
		}
	}
	return out
}

// Pending: every deletion finishes.
func (m *G3System) Pending(s G3) uint64 {
	var b uint64
	for w := range m.cfg.Owners {
		if s.W[w].V == vDeleting {
			b |= 1 << w
		}
	}
	for c := range m.n() {
		if s.C[c].V == vDeleting {
			b |= 1 << (MaxOwners + c)
		}
	}
	return b
}

// Obligation names bit i.
func (m *G3System) Obligation(i int) string {
	if i < MaxOwners {
		return fmt.Sprintf("W%d's deletion finishes", i)
	}
	return fmt.Sprintf("C%d's deletion finishes", i-MaxOwners)
}

// Fair: everything but users.
func (m *G3System) Fair(a uint8) bool { return a != g3User }

// Actor names a.
func (m *G3System) Actor(a uint8) string {
	switch {
	case a == g3User:
		return "user"
	case a == g3NS:
		return "namespace-ctl"
	case a == g3GC:
		return "garbage-coll"
	case a == g3Kubelet:
		return "kubelet"
	case a == g3Clock:
		return "clock"
	case a < g3Release:
		return fmt.Sprintf("W%d controller", a-g3Owner)
	case a < g3Count:
		return fmt.Sprintf("C%d release", a-g3Release)
	}
	return "?"
}

// Label describes a step.
func (m *G3System) Label(st Step) string {
	kind, arg := int(st.Code>>16&0xff), int(st.Code&0xffff)
	switch kind {
	case gDeleteChild:
		return fmt.Sprintf("deletes C%d", arg)
	case gDeleteOwner:
		return fmt.Sprintf("deletes W%d (background)", arg)
	case gDeleteOwnerFg:
		return fmt.Sprintf("deletes W%d (foreground)", arg)
	case gCancel:
		return fmt.Sprintf("cancels W%d", arg)
	case gDeleteNS:
		return "deletes the namespace"
	case gNSDelete:
		if arg&0x100 != 0 {
			return fmt.Sprintf("deletes W%d", arg&0xff)
		}
		return fmt.Sprintf("deletes C%d", arg)
	case gGCDelete:
		return fmt.Sprintf("deletes C%d (its owner is going)", arg)
	case gGCRelease:
		return fmt.Sprintf("removes foregroundDeletion from W%d", arg)
	case gFinish:
		return fmt.Sprintf("C%d finishes", arg)
	case gTimer:
		return fmt.Sprintf("C%d's 2-minute timer fires", arg)
	case gRecord:
		if st.Fault {
			return fmt.Sprintf("records C%d's result (from a stale cached copy)", arg)
		}
		return fmt.Sprintf("records C%d's result", arg)
	case gRelease:
		return "capture.Rule: Release; removes the capture finalizer"
	case gPersist:
		return "capture.Rule: Persist; writes the result into the owner's status"
	case gTimerRelease:
		return "timer fired: removes the capture finalizer (upstream Argo)"
	}
	return fmt.Sprintf("step %d", kind)
}

// Describe shows a state on one line.
func (m *G3System) Describe(s G3) string {
	var b strings.Builder
	b.WriteString("ns:")
	b.WriteString([]string{"live", "terminating"}[s.NS])
	for w := range m.cfg.Owners {
		state := map[version]string{vAlive: "active", vDeleting: "deleting(foreground)", vGone: "gone"}[s.W[w].V]
		if s.W[w].V == vAlive && m.ownerDone(s, w) {
			state = "finished"
			if s.Cancelled&(1<<w) != 0 {
				state = "cancelled"
			}
		}
		fmt.Fprintf(&b, " | W%d:%s", w, state)
		for c := range m.n() {
			if m.owner(c) != w {
				continue
			}
			run := "running"
			if s.Terminal&(1<<c) != 0 {
				run = "finished"
			}
			rec := ""
			if s.Recorded[w]&m.slot(c) != 0 {
				rec = ",result recorded"
			}
			fmt.Fprintf(&b, " C%d:%s(%s%s)", c, s.C[c].V, run, rec)
		}
	}
	return b.String()
}
