package model

import (
	"fmt"
	"strings"
)

// Sizes the state can hold; a configuration uses any part of them.
const (
	MaxParents = 2
	MaxDeps    = 4
)

// G2Config is one cleanup world: parents (connection objects) with their
// credential Secrets, dependents that create one external resource each
// through their parent, the operator's records, one sweeper, and the
// external service.
type G2Config struct {
	Parents, Dependents int
	// Late dependents (the last Late of them) do not exist at first; a user
	// creates them while the run goes on.
	Late int
	// Retain: bit i set gives dependent i DeletionPolicy Retain.
	Retain uint8
	// TwoStep: a create is two external calls, make then tag (a Database
	// made under a pending name, then tagged); otherwise one (a Role).
	TwoStep bool
	// Foreign: someone else may take dependent 0's external name at any
	// time (an untagged resource the operator must never delete).
	Foreign bool
	// Copy: a tenant's Server in another namespace reaches a copy of the
	// deployment, which proves the same identity.
	Copy bool
	// Admin: an admin designated a sweep connection outside the namespace.
	Admin bool
	// ByHand: an admin may remove a deleting dependent's cleanup finalizer
	// by hand (outside the guarantee; its record must still cover it).
	ByHand bool
	Faults Faults
	Rules  Rules
}

// G2 is one state of a cleanup world.
type G2 struct {
	NS   uint8 // 0 live, 1 terminating
	P, S [MaxParents]object
	D    [MaxDeps]object
	Rec  [MaxDeps]uint8 // the dependent's cleanup record: rec* bits
	Ext  [MaxDeps]uint8 // the dependent's external resource: ext* bits
	Pc   [MaxDeps]uint8 // the dependent's reconcile: pc* and its flags
	Hold [MaxParents]uint8
	// The sweeper's pass: stage, the record it works on, the connection,
	// and sweepDirty once someone else wrote that record since the sweeper
	// read it (its removal is conditional on the version it read).
	Sweep, SweepI, SweepVia, SweepSeen uint8
	Started                            uint8 // bit p: parent p's hold started counting (hold.Started)
	TimedOut                           uint8 // bit p: parent p's hold timed out
	Excused                            uint8 // bit i: released without delete after its hold timed out
	Foreign                            uint8 // someone else's resource with dependent 0's name: 1 exists, 2 deleted
	Bad                                uint8 // sticky: bad* bits
}

// Record bits.
const (
	recOn      = 1 << iota // the record exists
	recName                // it names the resource before the create (declared ID or pending name)
	recSettled             // the settle window passed since the last create attempt
	recForged              // edited by someone other than the operator to name a gone owner
)

// External resource bits.
const (
	extPending  = 1 << iota // made, not yet tagged (a two-step create half done)
	extTagged               // carries the owner's tag
	extRetained             // its owner chose Retain and let go: kept on purpose
)

// Sticky violations.
const (
	badForeign   = 1 << iota // someone else's resource deleted
	badRetained              // a Retain resource deleted
	badLiveOwner             // a live (not deleting) owner's resource deleted by the sweeper
	badDuplicate             // a resource created while one carrying the tag existed
)

// A dependent's reconcile: what it does next.
const (
	pcIdle    = iota
	pcConfirm // read the object (and the parent's hold) live before creating
	pcRecord  // write the record (ledger.Create's write-ahead)
	pcFind    // look for the tag again after the record write
	pcCreate  // the external create
	pcTag     // a two-step create: tag what was made
	pcConfirmDel
	pcRemove  // remove the record after a confirmed delete
	pcFinish  // remove the finalizer
	pcRelease // release without delete (the try after the hold failed)
	pcMask    = 0x0f
	pcTry     = 0x80 // this pass runs after the hold ended: a failure releases
	pcViaRec  = 0x40 // this cleanup goes through the record (removed at the end)
)

var pcNames = [...]string{pcIdle: "idle", pcConfirm: "confirm-live", pcRecord: "write-record", pcFind: "find-tag",
	pcCreate: "create", pcTag: "tag", pcConfirmDel: "confirm-deleted", pcRemove: "remove-record",
	pcFinish: "remove-finalizer", pcRelease: "release"}

// Sweeper stages.
const (
	swIdle = iota
	swDelete
	swConfirm
	swRemove
	swForget
)

var swNames = [...]string{swIdle: "idle", swDelete: "delete", swConfirm: "confirm-deleted", swRemove: "remove-record", swForget: "forget-record"}

// Sweep connections.
const (
	viaParent = iota // the record's own parent's connection
	viaAdmin         // the admin's sweep connection
	viaCopy          // a tenant's Server reaching a copy of the deployment
	viaOther         // another parent's connection (unscoped sweeper)
)

var viaNames = [...]string{viaParent: "its parent", viaAdmin: "the admin connection", viaCopy: "a tenant's Server (a copy of the deployment)", viaOther: "another parent"}

// Actors.
const (
	actUser uint8 = iota
	actNS
	actClock
	actCrash
	actForge
	actSweep
	actDep   // + i
	actHoldP = actDep + MaxDeps
	actHoldS = actHoldP + MaxParents
	actCount = actHoldS + MaxParents
)

// Step kinds (the middle byte of Step.Code).
const (
	kDelete = iota + 1
	kDeleteNS
	kUnfinalize
	kCreateDep
	kForeign
	kNSDelete
	kSettle
	kTimeout
	kCrash
	kForge
	kAddFin
	kAdopt
	kObserveMissing
	kConfirm
	kConfirmStale
	kWriteRecord
	kFindTag
	kFindTagFound
	kCreate
	kCreateFail
	kTag
	kForget
	kFinish
	kFinishNoRecord
	kRelease
	kReleaseNaive
	kCleanupDelete
	kConfirmDeleted
	kConfirmLeft
	kRemoveRecord
	kHoldSecret
	kHoldParent
	kHoldParentAdd
	kHoldConflict
	kHoldStart
	kSecretFin
	kSweepStart
	kSweepForgetStart
	kSweepDelete
	kSweepConfirm
	kSweepLeft
	kSweepRemove
	kSweepConflict
	kSweepForget
	kFail
	kLost
)

// G2System explores a G2Config.
type G2System struct{ cfg G2Config }

// NewG2 checks cfg.
func NewG2(cfg G2Config) (*G2System, error) {
	switch {
	case cfg.Parents < 1 || cfg.Parents > MaxParents:
		return nil, fmt.Errorf("model: %d parents; want 1 to %d", cfg.Parents, MaxParents)
	case cfg.Dependents < 1 || cfg.Dependents > MaxDeps:
		return nil, fmt.Errorf("model: %d dependents; want 1 to %d", cfg.Dependents, MaxDeps)
	case cfg.Late < 0 || cfg.Late > cfg.Dependents:
		return nil, fmt.Errorf("model: %d late dependents of %d", cfg.Late, cfg.Dependents)
	}
	return &G2System{cfg: cfg}, nil
}

// Config returns the configuration.
func (m *G2System) Config() G2Config { return m.cfg }

func (m *G2System) parentOf(i int) int { return i % m.cfg.Parents }

func (m *G2System) retain(i int) bool { return m.cfg.Retain&(1<<i) != 0 }

// declared: the record names the resource before it is made (a Role's
// declared ID; a Database's pending name with RecordPendingName).
func (m *G2System) declared() bool { return !m.cfg.TwoStep || m.cfg.Rules.RecordPendingName }

// Init is the namespace with its parents, Secrets and dependents, none of
// them handled yet, and nothing outside.
func (m *G2System) Init() []G2 {
	var s G2
	for p := range m.cfg.Parents {
		s.P[p], s.S[p] = newObject(vAlive), newObject(vAlive)
	}
	for i := range m.cfg.Dependents {
		s.D[i] = newObject(vAlive)
		if i >= m.cfg.Dependents-m.cfg.Late {
			s.D[i] = newObject(vNone)
		}
	}
	m.norm(&s)
	return []G2{s}
}

// norm clears what cannot matter any more, so that states differing only
// in it are one: the history of versions when no read is stale, and which
// releases were excused when an admin connection sweeps every record.
func (m *G2System) norm(s *G2) {
	if !m.cfg.Faults.Stale {
		for p := range s.P {
			s.P[p].Hist, s.S[p].Hist = 0, 0
		}
		for i := range s.D {
			s.D[i].Hist = 0
		}
	}
	if m.cfg.Admin {
		s.Excused = 0
	}
}

func code(a uint8, kind, arg int) uint32 { return uint32(a)<<24 | uint32(kind)<<16 | uint32(arg) }

// Next generates every step.
func (m *G2System) Next(s G2, emit0 func(Step, G2)) {
	emit := func(st Step, t G2) {
		m.norm(&t)
		emit0(st, t)
	}
	m.user(s, emit)
	m.namespace(s, emit)
	m.clock(s, emit)
	if m.cfg.Faults.Crash {
		busy := s.Sweep != swIdle
		for i := range m.cfg.Dependents {
			busy = busy || s.Pc[i] != pcIdle
		}
		for p := range m.cfg.Parents {
			busy = busy || s.Hold[p] != 0
		}
		if busy {
			t := s
			t.Pc, t.Hold = [MaxDeps]uint8{}, [MaxParents]uint8{}
			t.Sweep, t.SweepI, t.SweepVia, t.SweepSeen = swIdle, 0, 0, 0
			emit(Step{Actor: actCrash, Fault: true, Code: code(actCrash, kCrash, 0)}, t)
		}
	}
	if m.cfg.Faults.Forge {
		for i := range m.cfg.Dependents {
			if s.Rec[i]&recOn != 0 && s.Rec[i]&recForged == 0 && s.D[i].V.exists() {
				t := s
				wrote(&t, i)
				t.Rec[i] |= recForged
				emit(Step{Actor: actForge, Fault: true, Code: code(actForge, kForge, i)}, t)
			}
		}
	}
	for i := range m.cfg.Dependents {
		m.dependent(s, i, emit)
	}
	if m.cfg.Rules.Hold {
		for p := range m.cfg.Parents {
			m.holdParent(s, p, emit)
			m.holdSecret(s, p, emit)
		}
	}
	m.sweeper(s, emit)
}

func (m *G2System) user(s G2, emit func(Step, G2)) {
	u := func(kind, arg int, t G2) { emit(Step{Actor: actUser, Code: code(actUser, kind, arg)}, t) }
	for p := range m.cfg.Parents {
		if s.P[p].V == vAlive || s.P[p].V == vAliveFin {
			t := s
			t.P[p].del()
			u(kDelete, 0x100|p, t)
		}
		if s.S[p].V == vAlive || s.S[p].V == vAliveFin {
			t := s
			t.S[p].del()
			u(kDelete, 0x200|p, t)
		}
	}
	for i := range m.cfg.Dependents {
		switch s.D[i].V {
		case vDeleting:
			if !m.cfg.ByHand {
				continue
			}
			// An admin removes the cleanup finalizer by hand: outside the
			// guarantee, but the record must still cover what is left.
			t := s
			t.D[i].rmFin()
			t.Excused |= 1 << i
			u(kUnfinalize, i, t)
		case vAlive, vAliveFin:
			t := s
			t.D[i].del()
			u(kDelete, i, t)
		case vNone:
			if s.NS == 0 {
				t := s
				t.D[i].set(vAlive)
				u(kCreateDep, i, t)
			}
		}
	}
	if s.NS == 0 {
		t := s
		t.NS = 1
		u(kDeleteNS, 0, t)
	}
	if m.cfg.Foreign && s.Foreign == 0 && s.Ext[0]&(extPending|extTagged) == 0 {
		t := s
		t.Foreign = 1
		u(kForeign, 0, t)
	}
}

// namespace is the namespace controller: once the namespace is
// terminating it deletes every object in it, in any order.
func (m *G2System) namespace(s G2, emit func(Step, G2)) {
	if s.NS == 0 {
		return
	}
	e := func(arg int, t G2) { emit(Step{Actor: actNS, Code: code(actNS, kNSDelete, arg)}, t) }
	for p := range m.cfg.Parents {
		if s.P[p].V == vAlive || s.P[p].V == vAliveFin {
			t := s
			t.P[p].del()
			e(0x100|p, t)
		}
		if s.S[p].V == vAlive || s.S[p].V == vAliveFin {
			t := s
			t.S[p].del()
			e(0x200|p, t)
		}
	}
	for i := range m.cfg.Dependents {
		if s.D[i].V == vAlive || s.D[i].V == vAliveFin {
			t := s
			t.D[i].del()
			e(i, t)
		}
	}
}

// clock: the settle window of a record passes; a deleting parent's hold
// times out, once it has started counting (HoldFromStart: the hold's first
// look at the deletion; an operator that was down past the timeout starts
// it when it comes back). Time always moves on, so the clock is fair.
func (m *G2System) clock(s G2, emit func(Step, G2)) {
	for i := range m.cfg.Dependents {
		// The settle window is longer than any create attempt (its calls
		// are bounded by the call timeout), so it never passes while the
		// owner's reconcile is between its record write and its create.
		// A process paused for longer is the fencing problem of leader
		// failover, not modelled here.
		switch s.Pc[i] & pcMask {
		case pcFind, pcCreate, pcTag:
			continue
		}
		if s.Rec[i]&recOn != 0 && s.Rec[i]&recSettled == 0 {
			t := s
			t.Rec[i] |= recSettled
			emit(Step{Actor: actClock, Code: code(actClock, kSettle, i)}, t)
		}
	}
	if !m.cfg.Rules.Hold {
		return
	}
	for p := range m.cfg.Parents {
		if s.P[p].V == vDeleting && s.TimedOut&(1<<p) == 0 && m.holdAt(s, p) == htRunning {
			t := s
			t.TimedOut |= 1 << p
			emit(Step{Actor: actClock, Code: code(actClock, kTimeout, p)}, t)
		}
	}
}

// holdAt is where parent p's hold stands on the clock. Without
// HoldFromStart the hold counts from the deletion (started with it).
func (m *G2System) holdAt(s G2, p int) holdTime {
	switch {
	case s.TimedOut&(1<<p) != 0:
		return htOver
	case s.Started&(1<<p) != 0 || !m.cfg.Rules.HoldFromStart:
		return htRunning
	}
	return htUnstarted
}

// views of o for a cached read: the current version is not a fault, any
// other is a stale read (Faults.Stale).
func (m *G2System) views(o object) []version { return o.views(m.cfg.Faults.Stale) }

// reach reports whether a connection through parent p works now: the
// credentials are read live from its Secret on every call.
func (s *G2) reach(p int) bool { return s.S[p].V.exists() }

// deleteExt is an external delete of dependent i's resource by the owner
// or the sweeper: what it names by recorded ID and what carries the tag.
// byRecord: the record names the pending resource.
func (m *G2System) deleteExt(t *G2, i int, byRecord, sweeper bool) {
	e := t.Ext[i]
	gone := e&extTagged != 0 || (e&extPending != 0 && byRecord)
	if !gone {
		// The recorded ID may now be someone else's name (a Role's name
		// taken after the declared create failed).
		if i == 0 && t.Foreign == 1 && byRecord && !m.cfg.Rules.DeleteChecksTag {
			t.Foreign = 2
			t.Bad |= badForeign
		}
		return
	}
	if m.retain(i) {
		t.Bad |= badRetained
	}
	if sweeper && (t.D[i].V == vAlive || t.D[i].V == vAliveFin) {
		t.Bad |= badLiveOwner
	}
	t.Ext[i] = 0
}

// dependent is the lifecycle reconciler of dependent i, one step at a
// time: every API write and every external call is one step.
func (m *G2System) dependent(s G2, i int, emit func(Step, G2)) {
	a := actDep + uint8(i)
	p := m.parentOf(i)
	r := m.cfg.Rules
	pc := s.Pc[i]
	ok := func(kind int, t G2) { emit(Step{Actor: a, Code: code(a, kind, i)}, t) }
	// fail: the step does not land (a failed call, a conflict) and the
	// reconcile ends; lost: it landed and its answer was lost. A failure in
	// the try after the hold ended releases.
	after := func(t G2) G2 {
		if pc&pcTry != 0 {
			t.Pc[i] = pcRelease | pcTry
		} else {
			t.Pc[i] = pcIdle
		}
		return t
	}
	fail := func() {
		if m.cfg.Faults.Fail {
			emit(Step{Actor: a, Fault: true, Code: code(a, kFail, i)}, after(s))
		}
	}
	lost := func(t G2) {
		if m.cfg.Faults.Fail {
			emit(Step{Actor: a, Fault: true, Code: code(a, kLost, i)}, after(t))
		}
	}
	d := s.D[i].V
	switch pc & pcMask {
	case pcIdle:
		switch d {
		case vAlive:
			// The cleanup finalizer goes on before anything else.
			t := s
			t.D[i].addFin()
			ok(kAddFin, t)
			fail()
		case vAliveFin:
			m.createStart(s, i, emit)
		case vDeleting:
			m.deleteStart(s, i, emit)
		}
	case pcConfirm:
		// confirmLive: the object exists, carries the finalizer and is not
		// being deleted; with LiveHoldBeforeCreate the parent's hold too.
		held, _ := theHold.Dependent(s.P[p].V, m.holdAt(s, p))
		if r.SecretHeldBeforeCreate && !s.S[p].V.fin() {
			held = false
		}
		t := s
		if d == vAliveFin && (!r.Hold || !r.LiveHoldBeforeCreate || held) {
			t.Pc[i] = pcCreate
			if r.Record {
				t.Pc[i] = pcRecord
			}
			ok(kConfirm, t)
		} else {
			t.Pc[i] = pcIdle
			ok(kConfirmStale, t)
		}
		fail()
	case pcRecord:
		// ledger.Create: identify, then the record, before anything exists.
		if !s.reach(p) {
			emit(Step{Actor: a, Code: code(a, kFail, i)}, after(s))
			return
		}
		t := s
		wrote(&t, i)
		t.Rec[i] |= recOn
		t.Rec[i] &^= recSettled // a new create attempt: the window starts again
		if m.declared() {
			t.Rec[i] |= recName
		}
		t.Pc[i] = pcFind
		ok(kWriteRecord, t)
		fail()
		lost(t)
	case pcFind:
		if !s.reach(p) {
			emit(Step{Actor: a, Code: code(a, kFail, i)}, after(s))
			return
		}
		t := s
		if s.Ext[i]&extTagged != 0 {
			t.Pc[i] = pcIdle // adopted; the IDs are recorded (the next pass sees it Ready)
			ok(kFindTagFound, t)
		} else {
			t.Pc[i] = pcCreate
			ok(kFindTag, t)
		}
		fail()
	case pcCreate:
		if !s.reach(p) {
			emit(Step{Actor: a, Code: code(a, kFail, i)}, after(s))
			return
		}
		t := s
		if i == 0 && s.Foreign == 1 {
			t.Pc[i] = pcIdle // the name is someone else's: NeedsAction
			ok(kCreateFail, t)
			return
		}
		if s.Ext[i]&extTagged != 0 {
			t.Bad |= badDuplicate
		}
		if m.cfg.TwoStep && s.Ext[i]&extTagged == 0 {
			t.Ext[i] |= extPending
			t.Pc[i] = pcTag
		} else {
			t.Ext[i] = extTagged
			t.Pc[i] = pcIdle
		}
		ok(kCreate, t)
		fail()
		lost(t)
	case pcTag:
		if !s.reach(p) {
			emit(Step{Actor: a, Code: code(a, kFail, i)}, after(s))
			return
		}
		t := s
		t.Pc[i] = pcIdle
		if s.Ext[i]&extPending != 0 {
			t.Ext[i] = extTagged
		}
		ok(kTag, t)
		fail()
		lost(t)
	case pcConfirmDel:
		// The ledger proves the deployment again and looks for the tag.
		if !s.reach(p) {
			emit(Step{Actor: a, Code: code(a, kFail, i)}, after(s))
			return
		}
		t := s
		if s.Ext[i]&extTagged != 0 {
			ok(kConfirmLeft, after(t))
			return
		}
		t.Pc[i] = pcFinish | pc&pcTry
		if pc&pcViaRec != 0 {
			t.Pc[i] = pcRemove | pc&pcTry
		}
		ok(kConfirmDeleted, t)
		fail()
	case pcRemove:
		t := s
		wrote(&t, i)
		t.Rec[i] = 0
		t.Pc[i] = pcFinish | pc&pcTry
		ok(kRemoveRecord, t)
		fail()
		lost(t)
	case pcFinish:
		t := s
		t.D[i].rmFin()
		t.Pc[i] = pcIdle
		if m.retain(i) && t.Ext[i] != 0 {
			t.Ext[i] |= extRetained
		}
		ok(kFinish, t)
		fail()
		lost(t)
	case pcRelease:
		m.release(s, i, emit)
	}
}

// createStart is a reconcile of a live object carrying its finalizer:
// Connect reads the parent through the cache; the hold must be on; then
// Observe looks for the tag in the service.
func (m *G2System) createStart(s G2, i int, emit func(Step, G2)) {
	a := actDep + uint8(i)
	p := m.parentOf(i)
	r := m.cfg.Rules
	for _, pv := range m.views(s.P[p]) {
		stale := pv != s.P[p].V
		if !pv.exists() {
			continue // parent missing: requeue
		}
		if held, _ := theHold.Dependent(pv, m.holdAt(s, p)); r.Hold && !held {
			continue // waiting for the hold
		}
		if !s.reach(p) {
			continue // no credentials: the reconcile fails and retries
		}
		t := s
		switch {
		case s.Ext[i]&extTagged != 0:
			// Found by its tag: make sure it is recorded (recordIDs, which
			// writes a whole record when there is none).
			if !r.Record || s.Rec[i]&recOn != 0 {
				continue
			}
			wrote(&t, i)
			t.Rec[i] = recOn | recName
			emit(Step{Actor: a, Fault: stale, Code: code(a, kAdopt, i)}, t)
		case i == 0 && s.Foreign == 1:
			continue // the name is someone else's: NeedsAction, retried
		default:
			t.Pc[i] = pcConfirm
			emit(Step{Actor: a, Fault: stale, Code: code(a, kObserveMissing, i)}, t)
		}
	}
}

// deleteStart is a reconcile of a deleting object carrying its finalizer.
func (m *G2System) deleteStart(s G2, i int, emit func(Step, G2)) {
	a := actDep + uint8(i)
	p := m.parentOf(i)
	r := m.cfg.Rules
	ok := func(kind int, t G2, stale bool) { emit(Step{Actor: a, Fault: stale, Code: code(a, kind, i)}, t) }
	failed := func(t G2) {
		if m.cfg.Faults.Fail {
			emit(Step{Actor: a, Fault: true, Code: code(a, kFail, i)}, t)
		}
	}
	if m.retain(i) {
		// Retain: forget the record (the sweeper must never delete it),
		// then let go.
		t := s
		wrote(&t, i)
		t.Rec[i] = 0
		t.Pc[i] = pcFinish
		ok(kForget, t, false)
		return
	}
	if r.Record && r.FinishWithoutRecord && s.Rec[i]&recOn == 0 {
		// No record: nothing was ever created (record before create).
		t := s
		t.D[i].rmFin()
		ok(kFinishNoRecord, t, false)
		failed(s)
		return
	}
	for _, pv := range m.views(s.P[p]) {
		stale := pv != s.P[p].V
		_, over := theHold.Dependent(pv, m.holdAt(s, p))
		try := false
		switch {
		case r.Hold && over:
			if !r.TryDeleteAfterHold || !pv.exists() || !s.reach(p) {
				t := s
				// Excused only when nothing could have deleted it: the
				// parent or its Secret is gone.
				m.releaseWithoutDelete(&t, i, !pv.exists() || !s.reach(p))
				ok(kRelease, t, stale)
				continue
			}
			try = true
		case !r.Hold && !pv.exists():
			// The naive build: nothing can reach the service; let go.
			t := s
			t.D[i].rmFin()
			ok(kReleaseNaive, t, stale)
			continue
		}
		if !s.reach(p) {
			continue // no credentials: retried (within the hold)
		}
		// Ledger.Cleanup (or, without a record, lifecycle's own cleanup):
		// prove, find by tag, delete the recorded IDs and the tagged.
		t := s
		viaRec := r.Record && s.Rec[i]&recOn != 0
		m.deleteExt(&t, i, viaRec && s.Rec[i]&recName != 0, false)
		t.Pc[i] = pcConfirmDel
		if viaRec {
			t.Pc[i] |= pcViaRec
		}
		if try {
			t.Pc[i] |= pcTry
		}
		ok(kCleanupDelete, t, stale)
		if m.cfg.Faults.Fail {
			f := s
			if try {
				f.Pc[i] = pcRelease | pcTry
			}
			emit(Step{Actor: a, Fault: true, Code: code(a, kFail, i)}, f)
			l := t
			l.Pc[i] = f.Pc[i]
			emit(Step{Actor: a, Fault: true, Code: code(a, kLost, i)}, l)
		}
	}
}

// sweepDirty in SweepSeen: the record the sweeper works on was written
// since it read it, so its conditional removal conflicts (the record's
// resourceVersion changed).
const sweepDirty = 0x80

// wrote notes a write of record i by someone other than the sweeper.
func wrote(t *G2, i int) {
	if t.Sweep != swIdle && int(t.SweepI) == i {
		t.SweepSeen |= sweepDirty
	}
}

// releaseWithoutDelete lets go of dependent i without its external
// delete. unreachable: the delete could not have been made (tried and
// failed, or no parent or Secret); a release after the hold timed out is
// then excused (only the sweeper can finish it).
func (m *G2System) releaseWithoutDelete(t *G2, i int, unreachable bool) {
	t.D[i].rmFin()
	t.Pc[i] = pcIdle
	if unreachable && t.TimedOut&(1<<m.parentOf(i)) != 0 {
		t.Excused |= 1 << i
	}
}

func (m *G2System) release(s G2, i int, emit func(Step, G2)) {
	a := actDep + uint8(i)
	t := s
	m.releaseWithoutDelete(&t, i, true)
	emit(Step{Actor: a, Code: code(a, kRelease, i)}, t)
	if m.cfg.Faults.Fail {
		f := s
		f.Pc[i] = pcIdle
		emit(Step{Actor: a, Fault: true, Code: code(a, kFail, i)}, f)
	}
}

// depViews are the combinations of versions the cached dependents of
// parent p may show.
func (m *G2System) depViews(s G2, p int, f func(vs []version, stale bool)) {
	var idx []int
	for i := range m.cfg.Dependents {
		if m.parentOf(i) == p {
			idx = append(idx, i)
		}
	}
	vs := make([]version, len(idx))
	var rec func(k int, stale bool)
	rec = func(k int, stale bool) {
		if k == len(idx) {
			f(vs, stale)
			return
		}
		o := s.D[idx[k]]
		for _, v := range m.views(o) {
			vs[k] = v
			rec(k+1, stale || v != o.V)
		}
	}
	rec(0, false)
}

// current are the versions of parent p's dependents now.
func (m *G2System) current(s G2, p int) []version {
	var vs []version
	for i := range m.cfg.Dependents {
		if m.parentOf(i) == p {
			vs = append(vs, s.D[i].V)
		}
	}
	return vs
}

// holdParent is hold's parent reconciler: the real verdict (tables.go) on
// the parent as it is (its writes are conditional on it), the Secret as
// the cache shows it and the dependents as the cache shows them; the
// Secret is written before the parent. The Secret is read through the
// cache and live only to be written (hold.holdSecret), so the one stale
// view that matters is one still showing a hold the Secret reconciler has
// since taken off: the pass skips the Secret's write and goes on to the
// parent's.
func (m *G2System) holdParent(s G2, p int, emit func(Step, G2)) {
	a := actHoldP + uint8(p)
	if s.Hold[p] == 1 {
		t := s
		t.Hold[p] = 0
		if s.P[p].V == vAlive {
			t.P[p].addFin()
			emit(Step{Actor: a, Code: code(a, kHoldParentAdd, p)}, t)
		} else {
			emit(Step{Actor: a, Code: code(a, kHoldConflict, p)}, t)
		}
		if m.cfg.Faults.Fail {
			emit(Step{Actor: a, Fault: true, Code: code(a, kFail, p)}, t)
		}
		return
	}
	if !s.P[p].V.exists() {
		return
	}
	at := m.holdAt(s, p)
	for _, sv := range m.views(s.S[p]) {
		if sv != s.S[p].V && (!sv.fin() || s.S[p].V.fin()) {
			continue
		}
		m.depViews(s, p, func(vs []version, stale bool) {
			stale = stale || sv != s.S[p].V
			ans := theHold.Parent(s.P[p].V, sv, at, vs)
			if stale && !ans.PFin && s.P[p].V.fin() && m.cfg.Rules.LiveBeforeRelease {
				// The hold comes off only if a live count agrees.
				ans.PFin = theHold.Parent(s.P[p].V, sv, at, m.current(s, p)).PFin
			}
			t := s
			switch {
			case at == htUnstarted && ans.Started:
				// The hold's first look at the deletion: it marks when it
				// started (its only write in that pass).
				if ans.SFin != sv.fin() || ans.PFin != s.P[p].V.fin() {
					panic(fmt.Sprintf("model: hold's pass that started the hold on P%d also wrote finalizers: %+v", p, ans))
				}
				t.Started |= 1 << p
				emit(Step{Actor: a, Fault: stale, Code: code(a, kHoldStart, p)}, t)
			case ans.SFin != sv.fin():
				if ans.SFin {
					t.S[p].addFin()
				} else {
					t.S[p].rmFin()
				}
				if ans.PFin != s.P[p].V.fin() {
					t.Hold[p] = 1
				}
				emit(Step{Actor: a, Fault: stale, Code: code(a, kHoldSecret, p)}, t)
			case ans.PFin != s.P[p].V.fin():
				arg := p
				if ans.PFin {
					t.P[p].addFin()
					arg |= 0x100
				} else {
					t.P[p].rmFin()
				}
				emit(Step{Actor: a, Fault: stale, Code: code(a, kHoldParent, arg)}, t)
			default:
				return
			}
			if m.cfg.Faults.Fail {
				emit(Step{Actor: a, Fault: true, Code: code(a, kFail, p)}, s)
			}
		})
	}
}

// holdSecret is hold's Secret reconciler.
func (m *G2System) holdSecret(s G2, p int, emit func(Step, G2)) {
	a := actHoldS + uint8(p)
	if !s.S[p].V.exists() {
		return
	}
	for _, pv := range m.views(s.P[p]) {
		m.depViews(s, p, func(vs []version, stale bool) {
			want := theHold.Secret(pv, s.S[p].V, vs)
			stale = stale || pv != s.P[p].V
			if stale && !want && s.S[p].V.fin() && m.cfg.Rules.LiveBeforeRelease {
				want = theHold.Secret(s.P[p].V, s.S[p].V, m.current(s, p))
			}
			if want == s.S[p].V.fin() {
				return
			}
			t := s
			if want {
				t.S[p].addFin()
			} else {
				t.S[p].rmFin()
			}
			arg := p
			if want {
				arg |= 0x100
			}
			emit(Step{Actor: a, Fault: stale, Code: code(a, kSecretFin, arg)}, t)
		})
	}
}

// sweeper is sweep.Sweeper's pass, one record at a time.
func (m *G2System) sweeper(s G2, emit func(Step, G2)) {
	a := actSweep
	ok := func(kind, arg int, t G2, fault bool) { emit(Step{Actor: a, Fault: fault, Code: code(a, kind, arg)}, t) }
	idle := s
	idle.Sweep, idle.SweepI, idle.SweepVia, idle.SweepSeen = swIdle, 0, 0, 0
	fail := func() {
		if m.cfg.Faults.Fail {
			ok(kFail, 0, idle, true)
		}
	}
	i := int(s.SweepI)
	arg := i | int(s.SweepVia)<<8
	works := func(via uint8) bool {
		switch via {
		case viaParent:
			return s.reach(m.parentOf(i))
		case viaOther:
			return s.reach(1 - m.parentOf(i))
		}
		return true
	}
	switch s.Sweep {
	case swIdle:
		m.sweepStart(s, emit)
	case swForget:
		t := idle
		if s.SweepSeen&sweepDirty == 0 && s.Rec[i]&recOn != 0 {
			t.Rec[i] = 0
			if t.Ext[i] != 0 {
				t.Ext[i] |= extRetained
			}
		}
		ok(kSweepForget, arg, t, false)
		fail()
	case swDelete:
		if !works(s.SweepVia) {
			ok(kFail, arg, idle, false)
			return
		}
		t := s
		if s.SweepVia != viaCopy {
			m.deleteExt(&t, i, s.Rec[i]&recName != 0, true)
		}
		t.Sweep = swConfirm
		ok(kSweepDelete, arg, t, false)
		fail()
		l := t
		l.Sweep, l.SweepI, l.SweepVia, l.SweepSeen = swIdle, 0, 0, 0
		if m.cfg.Faults.Fail {
			ok(kLost, arg, l, true)
		}
	case swConfirm:
		if !works(s.SweepVia) {
			ok(kFail, arg, idle, false)
			return
		}
		if s.SweepVia != viaCopy && s.Ext[i]&extTagged != 0 {
			ok(kSweepLeft, arg, idle, false)
			return
		}
		t := s
		t.Sweep = swRemove
		ok(kSweepConfirm, arg, t, false)
		fail()
	case swRemove:
		t := idle
		if s.SweepSeen&sweepDirty != 0 || s.Rec[i]&recOn == 0 {
			ok(kSweepConflict, arg, t, false)
			return
		}
		t.Rec[i] = 0
		ok(kSweepRemove, arg, t, false)
		fail()
		if m.cfg.Faults.Fail {
			ok(kLost, arg, t, true)
		}
	}
}

// sweepStart picks a record and decides it as sweep's pass does: owner
// gone (by the record's name, through the cache or live), settled, then a
// connection that proves the deployment.
func (m *G2System) sweepStart(s G2, emit func(Step, G2)) {
	r := m.cfg.Rules
	for i := range m.cfg.Dependents {
		rec := s.Rec[i]
		if rec&recOn == 0 {
			continue
		}
		if rec&recForged != 0 && r.SweepAuthenticated {
			continue // not written by the operator: reported, never acted on
		}
		if r.SweepSettle && rec&recSettled == 0 {
			continue
		}
		owner := []version{s.D[i].V}
		if !r.SweepLiveOwner {
			owner = m.views(s.D[i])
		}
		for _, ov := range owner {
			stale := ov != s.D[i].V
			gone := !ov.exists() || rec&recForged != 0 // a forged record names someone gone
			if !gone {
				continue
			}
			if m.retain(i) && r.SweepKeepsRetain {
				t := s
				t.Sweep, t.SweepI, t.SweepSeen = swForget, uint8(i), 0
				emit(Step{Actor: actSweep, Fault: stale, Code: code(actSweep, kSweepForgetStart, i)}, t)
				continue
			}
			for _, via := range m.candidates(s, i) {
				t := s
				t.Sweep, t.SweepI, t.SweepVia, t.SweepSeen = swDelete, uint8(i), via, 0
				emit(Step{Actor: actSweep, Fault: stale, Code: code(actSweep, kSweepStart, i|int(via)<<8)}, t)
			}
		}
	}
}

// candidates are the connections that prove record i's deployment and
// that the sweeper may use.
func (m *G2System) candidates(s G2, i int) []uint8 {
	var out []uint8
	p := m.parentOf(i)
	// A parent's connection is known while the parent is (the sweeper's
	// targets are the Servers in its cache); it identifies only while its
	// Secret is there.
	if s.P[p].V.exists() && s.reach(p) {
		out = append(out, viaParent)
	}
	if m.cfg.Admin {
		out = append(out, viaAdmin)
	}
	if !m.cfg.Rules.SweepScoped {
		if m.cfg.Parents > 1 && s.P[1-p].V.exists() && s.reach(1-p) {
			out = append(out, viaOther)
		}
		if m.cfg.Copy {
			out = append(out, viaCopy)
		}
	}
	return out
}

// Safety is checked in every state.
func (m *G2System) Safety(s G2) []string {
	var out []string
	for i := range m.cfg.Dependents {
		e := s.Ext[i]
		if e&(extPending|extTagged) != 0 && !m.retain(i) && !s.D[i].V.exists() && s.Rec[i]&recOn == 0 {
			out = append(out, fmt.Sprintf("no-leak: D%d's external resource has no owner and no cleanup record", i))
		}
	}
	if s.Bad&badForeign != 0 {
		out = append(out, "no-wrong-delete: someone else's untagged resource was deleted")
	}
	if s.Bad&badRetained != 0 {
		out = append(out, "no-wrong-delete: a Retain resource was deleted")
	}
	if s.Bad&badLiveOwner != 0 {
		out = append(out, "no-wrong-delete: the sweeper deleted a live owner's resource")
	}
	if s.Bad&badDuplicate != 0 {
		out = append(out, "no-duplicate: a resource was created while one carrying the tag existed")
	}
	return out
}

// Obligation bits: 0..MaxParents-1 parents, then Secrets, then dependents
// deleting; then orphans; then records of gone owners.
const (
	obParent = 0
	obSecret = obParent + MaxParents
	obDep    = obSecret + MaxParents
	obOrphan = obDep + MaxDeps
	obRecord = obOrphan + MaxDeps
)

// Pending: every deletion finishes (a held parent's and Secret's once
// nothing needs them); every orphaned resource is deleted
// (unless its owner was released after its hold timed out and there is no
// admin sweep connection: then only the sweeper could, and it has no way
// in); with an admin connection, every record of a gone owner is swept.
func (m *G2System) Pending(s G2) uint64 {
	var b uint64
	for p := range m.cfg.Parents {
		// A parent and its Secret are held while dependents need them: their
		// deletion must finish once the namespace goes or every dependent of
		// theirs is going.
		free := s.NS == 1
		if !free {
			free = true
			for i := range m.cfg.Dependents {
				if m.parentOf(i) == p && s.D[i].V != vDeleting && s.D[i].V != vGone {
					free = false
				}
			}
		}
		if !free {
			continue
		}
		if s.P[p].V == vDeleting {
			b |= 1 << (obParent + p)
		}
		if s.S[p].V == vDeleting {
			b |= 1 << (obSecret + p)
		}
	}
	for i := range m.cfg.Dependents {
		if s.D[i].V == vDeleting {
			b |= 1 << (obDep + i)
		}
		gone := s.D[i].V == vGone
		e := s.Ext[i]
		// Excused: only the sweeper can still delete it, and it has no way
		// in (released after the hold timed out, or by hand, with no admin
		// connection), or its record was edited by an attacker, which the
		// sweeper reports and never acts on.
		excused := s.Excused&(1<<i) != 0 && !m.cfg.Admin || s.Rec[i]&recForged != 0
		if gone && e&(extPending|extTagged) != 0 && !m.retain(i) && !excused {
			b |= 1 << (obOrphan + i)
		}
		if gone && m.cfg.Admin && s.Rec[i]&recOn != 0 && s.Rec[i]&recForged == 0 {
			b |= 1 << (obRecord + i)
		}
	}
	return b
}

// Obligation names bit i.
func (m *G2System) Obligation(i int) string {
	switch {
	case i < obSecret:
		return fmt.Sprintf("P%d's deletion finishes", i-obParent)
	case i < obDep:
		return fmt.Sprintf("S%d's deletion finishes", i-obSecret)
	case i < obOrphan:
		return fmt.Sprintf("D%d's deletion finishes", i-obDep)
	case i < obRecord:
		return fmt.Sprintf("D%d's orphaned external resource is deleted", i-obOrphan)
	default:
		return fmt.Sprintf("D%d's cleanup record is swept", i-obRecord)
	}
}

// Fair: everything but users and faults.
func (m *G2System) Fair(a uint8) bool { return a != actUser && a != actCrash && a != actForge }

// Actor names a.
func (m *G2System) Actor(a uint8) string {
	switch {
	case a == actUser:
		return "user"
	case a == actNS:
		return "namespace-ctl"
	case a == actClock:
		return "clock"
	case a == actCrash:
		return "operator"
	case a == actForge:
		return "attacker"
	case a == actSweep:
		return "sweeper"
	case a < actHoldP:
		return fmt.Sprintf("D%d reconcile", a-actDep)
	case a < actHoldS:
		return fmt.Sprintf("hold P%d", a-actHoldP)
	case a < actCount:
		return fmt.Sprintf("hold S%d", a-actHoldS)
	}
	return "?"
}

func objName(arg int) string {
	switch arg >> 8 {
	case 1:
		return fmt.Sprintf("P%d", arg&0xff)
	case 2:
		return fmt.Sprintf("S%d", arg&0xff)
	}
	return fmt.Sprintf("D%d", arg&0xff)
}

// Label describes a step.
func (m *G2System) Label(st Step) string {
	kind, arg := int(st.Code>>16&0xff), int(st.Code&0xffff)
	stale := ""
	if st.Fault {
		stale = " (from a stale cached read)"
	}
	switch kind {
	case kDelete:
		return "deletes " + objName(arg)
	case kDeleteNS:
		return "deletes the namespace"
	case kUnfinalize:
		return fmt.Sprintf("admin removes D%d's cleanup finalizer by hand", arg)
	case kCreateDep:
		return fmt.Sprintf("creates D%d", arg)
	case kForeign:
		return "someone else creates a resource with D0's external name (untagged)"
	case kNSDelete:
		return "deletes " + objName(arg)
	case kSettle:
		return fmt.Sprintf("D%d's record passes its settle window", arg)
	case kTimeout:
		return fmt.Sprintf("P%d's hold times out", arg)
	case kCrash:
		return "crashes and restarts (every in-flight reconcile and sweep is lost)"
	case kForge:
		return fmt.Sprintf("edits D%d's record to name an owner that is gone", arg)
	case kAddFin:
		return "adds the cleanup finalizer"
	case kAdopt:
		return "finds its resource by tag, no record: writes one" + stale
	case kObserveMissing:
		return "Observe: nothing carries the tag; going to create" + stale
	case kConfirm:
		return "confirmLive: the object (and the parent's hold) read live, OK"
	case kConfirmStale:
		return "confirmLive: the live object says no; not creating"
	case kWriteRecord:
		return "ledger: identify, write the cleanup record (before the create)"
	case kFindTag:
		return "ledger: nothing tagged yet"
	case kFindTagFound:
		return "ledger: found tagged after the record write; adopted"
	case kCreate:
		if m.cfg.TwoStep {
			return "creates the external resource (untagged, pending name)"
		}
		return "creates the external resource (tagged)"
	case kCreateFail:
		return "create fails: the name is someone else's (NeedsAction)"
	case kTag:
		return "tags the pending resource"
	case kForget:
		return "Retain: forgets the record (Ledger.Forget)"
	case kFinish:
		return "removes the cleanup finalizer"
	case kFinishNoRecord:
		return "no record, nothing created: removes the finalizer at once"
	case kRelease:
		return "hold over: releases without delete (record stays for the sweeper)" + stale
	case kReleaseNaive:
		return "parent gone, no hold: lets go without delete" + stale
	case kCleanupDelete:
		return "cleanup: proves the deployment, deletes recorded IDs and tagged" + stale
	case kConfirmDeleted:
		return "cleanup: proves again, nothing tagged left"
	case kConfirmLeft:
		return "cleanup: something tagged is left; fails"
	case kRemoveRecord:
		return "ledger: removes the record"
	case kHoldSecret:
		return fmt.Sprintf("adds the hold on S%d (the Secret before the parent)", arg) + stale
	case kHoldParent:
		if arg&0x100 != 0 {
			return fmt.Sprintf("adds the hold on P%d", arg&0xff) + stale
		}
		return fmt.Sprintf("removes the hold from P%d: no dependent still needs it", arg&0xff) + stale
	case kHoldParentAdd:
		return fmt.Sprintf("adds the hold on P%d (after its Secret)", arg)
	case kHoldConflict:
		return fmt.Sprintf("P%d changed meanwhile: conflict", arg)
	case kHoldStart:
		return fmt.Sprintf("sees P%d deleting: its hold starts counting now", arg)
	case kSecretFin:
		if arg&0x100 != 0 {
			return fmt.Sprintf("Secret reconciler adds the hold on S%d", arg&0xff) + stale
		}
		return fmt.Sprintf("Secret reconciler removes the hold from S%d: no parent needs it", arg&0xff) + stale
	case kSweepStart:
		return fmt.Sprintf("D%d's record: owner gone, settled; cleans up through %s", arg&0xff, viaNames[arg>>8]) + stale
	case kSweepForgetStart:
		return fmt.Sprintf("D%d's record: owner gone, Retain: will forget it", arg&0xff) + stale
	case kSweepDelete:
		return fmt.Sprintf("deletes D%d's recorded IDs and tagged through %s", arg&0xff, viaNames[arg>>8])
	case kSweepConfirm:
		return fmt.Sprintf("proves again, nothing of D%d's left (through %s)", arg&0xff, viaNames[arg>>8])
	case kSweepLeft:
		return fmt.Sprintf("something tagged for D%d is left; retries later", arg&0xff)
	case kSweepRemove:
		return fmt.Sprintf("removes D%d's record", arg&0xff)
	case kSweepConflict:
		return fmt.Sprintf("D%d's record changed meanwhile: keeps it", arg&0xff)
	case kSweepForget:
		return fmt.Sprintf("forgets D%d's Retain record", arg&0xff)
	case kFail:
		return "the call fails (not landed); the reconcile ends"
	case kLost:
		return "the call landed but its answer was lost; the reconcile ends"
	}
	return fmt.Sprintf("step %d", kind)
}

// Describe shows a state on one line.
func (m *G2System) Describe(s G2) string {
	var b strings.Builder
	b.WriteString("ns:")
	b.WriteString([]string{"live", "terminating"}[s.NS])
	for p := range m.cfg.Parents {
		fmt.Fprintf(&b, " P%d:%s S%d:%s", p, s.P[p].V, p, s.S[p].V)
		switch m.holdAt(s, p) {
		case htOver:
			b.WriteString("(hold timed out)")
		case htRunning:
			if s.P[p].V == vDeleting && m.cfg.Rules.HoldFromStart {
				b.WriteString("(hold started)")
			}
		}
	}
	for i := range m.cfg.Dependents {
		fmt.Fprintf(&b, " | D%d:%s", i, s.D[i].V)
		if m.retain(i) {
			b.WriteString("(Retain)")
		}
		rec := "-"
		if s.Rec[i]&recOn != 0 {
			rec = "yes"
			if s.Rec[i]&recForged != 0 {
				rec = "forged"
			}
		}
		e := "-"
		switch {
		case s.Ext[i]&extTagged != 0:
			e = "tagged"
		case s.Ext[i]&extPending != 0:
			e = "pending"
		}
		if s.Ext[i]&extRetained != 0 {
			e += "(kept)"
		}
		fmt.Fprintf(&b, " rec:%s ext:%s", rec, e)
		if pc := s.Pc[i]; pc != pcIdle {
			fmt.Fprintf(&b, " [%s", pcNames[pc&pcMask])
			if pc&pcTry != 0 {
				b.WriteString(",after-hold")
			}
			b.WriteString("]")
		}
	}
	if s.Foreign == 1 {
		b.WriteString(" | foreign resource")
	}
	if s.Sweep != swIdle {
		fmt.Fprintf(&b, " | sweeper:%s D%d via %s", swNames[s.Sweep], s.SweepI, viaNames[s.SweepVia])
	}
	return b.String()
}
