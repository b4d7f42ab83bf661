package ledger

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/finale-dev/finale/errclass"
)

// Target is what Cleanup (and the sweeper) need from a connection: proofs,
// and the delete of one resource by its exact ID. Delete removes the
// resource with id only if it carries tag, and returns nil when no resource
// with id carries tag (gone, never made, or someone else's); an error the
// errclass classifier puts in NotFound counts as gone too.
type Target interface {
	Prover
	Delete(ctx context.Context, id, tag string) error
}

// TargetFuncs adapts two functions to Target.
type TargetFuncs struct {
	ProveFn  func(ctx context.Context, q Question) (Answer, error)
	DeleteFn func(ctx context.Context, id, tag string) error
}

// Prove implements Prover.
func (f TargetFuncs) Prove(ctx context.Context, q Question) (Answer, error) { return f.ProveFn(ctx, q) }

// Delete implements Target.
func (f TargetFuncs) Delete(ctx context.Context, id, tag string) error {
	return f.DeleteFn(ctx, id, tag)
}

// CreateFunc creates the owner's external resources, putting tag on each, and
// returns their IDs. It is called only after the record is durably written,
// with a context bounded by Options.CreateTimeout. An error it wraps with
// ErrNotSent says the create never reached the service.
type CreateFunc func(ctx context.Context, tag string) ([]string, error)

// Options tune a Ledger. Key is required.
type Options struct {
	// Key signs records and derives deployment tokens (LoadKey).
	Key Key
	// Clock stamps created-at and create-attempt times; nil is the real clock.
	Clock clock.PassiveClock
	// Classifier decides which Delete errors mean "not found"; nil is
	// errclass.Default.
	Classifier *errclass.Classifier
	// Remember bounds how many records the ledger keeps in memory as it
	// last wrote them (see Ledger); zero is DefaultRemember, negative
	// keeps none.
	Remember int
	// CreateTimeout bounds each create Create calls, counted from the
	// attempt time written into the record before it (a slow record write
	// leaves the create less time, never more); zero is
	// DefaultCreateTimeout.
	CreateTimeout time.Duration
	// CreateLanding is how long after its deadline the service may still
	// complete a create its client abandoned: the service's own bound on a
	// request nobody waits for (a statement or lock timeout, a server-side
	// cancel). Zero is DefaultCreateLanding. An attempt whose outcome is
	// unknown is in doubt for CreateTimeout plus CreateLanding
	// (ErrCreateInDoubt); a service that bounds nothing cannot be given a
	// safe value, and a create of such a service that lands later still
	// leaks.
	CreateLanding time.Duration
}

// DefaultRemember is Options.Remember when unset: at a few hundred bytes a
// record, about 4 MiB.
const DefaultRemember = 10_000

// Ledger writes and removes cleanup records around external creates and
// deletes.
//
// It remembers the records it wrote, as it wrote them, so that the
// reconcile that later adds IDs or cleans up needs no read first. A
// remembered record can be stale only if some other writer changed it
// since; every write and the final removal are conditional on the version
// the ledger remembers, so a stale copy costs a conflict and a fresh read,
// never a lost ID: records only grow, so a stale copy lacks IDs rather than
// holding wrong ones, and Cleanup removes the record only after its
// conditional delete proves nobody added any.
type Ledger struct {
	store    Store
	key      Key
	clock    clock.PassiveClock
	class    *errclass.Classifier
	remember int

	createTimeout, createLanding time.Duration

	mu  sync.Mutex // guards mem, settled and settledPrune
	mem map[types.UID]*Record
	// settled maps an owner to its last create attempt whose outcome this
	// ledger saw (see inDoubt).
	settled      map[types.UID]time.Time
	settledPrune int
}

// conflictRetries bounds the read-modify-write loops: a record has one writer
// in practice (the owner's reconcile, or the leader's sweeper), so repeated
// conflicts mean something is wrong and the caller should requeue.
const conflictRetries = 3

// New returns a Ledger over store. A missing store or key is an error: a
// ledger that cannot sign would write records nobody may act on.
func New(store Store, opts Options) (*Ledger, error) {
	if store == nil {
		return nil, errors.New("ledger: New: nil Store")
	}
	if !opts.Key.valid() {
		return nil, fmt.Errorf("%w: Options.Key is required (ledger.LoadKey reads or creates it)", ErrKey)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Classifier == nil {
		opts.Classifier = errclass.Default
	}
	if opts.Remember == 0 {
		opts.Remember = DefaultRemember
	}
	if opts.CreateTimeout < 0 || opts.CreateLanding < 0 {
		return nil, fmt.Errorf("ledger: New: Options.CreateTimeout (%s) and CreateLanding (%s) must not be negative", opts.CreateTimeout, opts.CreateLanding)
	}
	if opts.CreateTimeout == 0 {
		opts.CreateTimeout = DefaultCreateTimeout
	}
	if opts.CreateLanding == 0 {
		opts.CreateLanding = DefaultCreateLanding
	}
	return &Ledger{
		store: store, key: opts.Key, clock: opts.Clock, class: opts.Classifier, remember: opts.Remember,
		createTimeout: opts.CreateTimeout, createLanding: opts.CreateLanding,
		mem: map[types.UID]*Record{}, settled: map[types.UID]time.Time{}, settledPrune: minSettledPrune,
	}, nil
}

// ErrNoNotes: the ledger's Store keeps no notes (it is not a Noter).
var ErrNoNotes = errors.New("ledger: the store keeps no notes")

// Note keeps the sweeper's verdict n on the stored record r (see Noter);
// ErrNoNotes when the store cannot. It never changes what the MAC covers.
func (l *Ledger) Note(ctx context.Context, r *Record, n Note) error {
	nt, ok := l.store.(Noter)
	if !ok {
		return ErrNoNotes
	}
	// The note moves the stored version: a record this ledger remembers
	// is stale now, and would only cost a conflict.
	l.drop(r.Owner.UID)
	return nt.Note(ctx, r, n)
}

// Store returns the ledger's store.
func (l *Ledger) Store() Store { return l.store }

// KeyID is the public name of the ledger's key.
func (l *Ledger) KeyID() string { return l.key.ID() }

// recall returns a copy of uid's record as this ledger last wrote it, or
// nil.
func (l *Ledger) recall(uid types.UID) *Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.mem[uid]; ok {
		return r.DeepCopy()
	}
	return nil
}

// keep remembers r as just written, within the bound.
func (l *Ledger) keep(r *Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.mem[r.Owner.UID]; ok || len(l.mem) < l.remember {
		l.mem[r.Owner.UID] = r.DeepCopy()
	}
}

// drop forgets uid's record: it is gone, or someone else changed it.
func (l *Ledger) drop(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.mem, uid)
}

// sign sets r.MAC.
func (l *Ledger) sign(r *Record) {
	r.MAC = hex.EncodeToString(l.key.mac("finale-record/v2", r.signed()))
}

// authentic reports whether r carries this ledger's MAC.
func (l *Ledger) authentic(r *Record) bool {
	want := hex.EncodeToString(l.key.mac("finale-record/v2", r.signed()))
	return hmac.Equal([]byte(want), []byte(r.MAC))
}

// Get returns uid's record, authenticated: ErrNotFound when there is none,
// an error wrapping ErrInvalidRecord (ErrUnauthenticated among them) when
// it cannot be used.
func (l *Ledger) Get(ctx context.Context, uid types.UID) (*Record, error) {
	r, err := l.store.Get(ctx, uid)
	if err != nil {
		return r, err
	}
	if !l.authentic(r) {
		return r, fmt.Errorf("%w: record for %s", ErrUnauthenticated, r.Owner)
	}
	return r, nil
}

// List returns one page of records, authenticated: a record whose MAC does
// not verify is in Page.Invalid with an error wrapping ErrUnauthenticated.
func (l *Ledger) List(ctx context.Context, limit int64, cont string) (Page, error) {
	p, err := l.store.List(ctx, limit, cont)
	if err != nil {
		return p, err
	}
	ok := p.Records[:0]
	for _, r := range p.Records {
		if l.authentic(r) {
			ok = append(ok, r)
			continue
		}
		p.Invalid = append(p.Invalid, Invalid{Record: r, Err: fmt.Errorf("%w: record for %s", ErrUnauthenticated, r.Owner)})
	}
	p.Records = ok
	return p, nil
}

// Forget removes uid's record without deleting anything it covers. A
// missing record is not an error. For an owner whose resources are to be
// retained, prefer Keep: a record forgotten cannot be adopted by a
// restored owner.
func (l *Ledger) Forget(ctx context.Context, uid types.UID) error {
	l.drop(uid)
	r, err := l.store.Get(ctx, uid)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	return l.store.Delete(ctx, r)
}

// Keep marks the record of p.Owner, which is going with deletion policy
// Retain, as kept: its policy becomes Retain (and its namespace UID is
// filled in when p has one and it lacks it), and it stays. The sweeper
// never deletes through a Retain record; it reports it, for as long as it
// exists, so that a restored owner can still adopt what was retained
// (Adopt), and an admin can remove it when nobody will. A missing record
// is not an error (nil, nil). Neither is a record that cannot be used
// (invalid, unsigned, or of the previous layout): it is left as it is,
// where the sweeper reports it and never acts on it (nil, nil): nothing is
// deleted for a Retain owner, so such a record must not hold the owner's
// deletion.
func (l *Ledger) Keep(ctx context.Context, p Plan) (*Record, error) {
	p.Policy = PolicyRetain
	p.Declared = nil
	if err := p.check(); err != nil {
		return nil, err
	}
	uid := p.Owner.UID
	rec, err := l.update(ctx, uid, nil, func(r *Record) (bool, error) {
		if r == nil {
			return false, fmt.Errorf("%w for uid %s", ErrNotFound, uid)
		}
		return p.apply(r), nil
	}, nil)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case errors.Is(err, ErrInvalidRecord):
		l.drop(uid)
		return rec, nil
	}
	return rec, err
}

// Migrate rewrites the record of a live owner, p.Owner, written by the
// previous release (LegacySchemaVersion: unsigned) in the current layout,
// signed, and returns it. The caller vouches for the owner: it exists, with
// this UID, kind, namespace and name (the object being reconciled). conn,
// the owner's own connection, must prove a deployment (enrolling a
// sentinel for the operator's key where there is none: the previous
// release's sentinel holds no such token) that is the deployment the old
// record names; the record's IDs become what that deployment says carries
// the owner's tag, not what the unsigned record lists. The old record is
// replaced conditionally on its version. A record already in the current
// layout is returned as it is; none is ErrNotFound. Anything that does not
// match (another owner, another deployment) is an error, and the old
// record stays, reported.
func (l *Ledger) Migrate(ctx context.Context, p Plan, conn Prover) (*Record, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	r, err := l.Get(ctx, p.Owner.UID)
	if !errors.Is(err, ErrLegacyRecord) {
		return r, err
	}
	q := l.key.question(Tag(p.Owner))
	q.Enroll = l.key.enrollment()
	a, err := ask(ctx, conn, q)
	if err != nil {
		return nil, err
	}
	return l.migrate(ctx, p, q, a)
}

// migrate replaces p.Owner's legacy record using a, conn's answer to q
// (which asked for p.Owner's tag).
func (l *Ledger) migrate(ctx context.Context, p Plan, q Question, a Answer) (*Record, error) {
	old, err := l.store.Get(ctx, p.Owner.UID)
	if !errors.Is(err, ErrLegacyRecord) {
		if err == nil {
			return l.Get(ctx, p.Owner.UID) // migrated meanwhile
		}
		return nil, err
	}
	o, n := old.Owner, p.Owner
	if o.GroupVersionKind().GroupKind() != n.GroupVersionKind().GroupKind() || o.Namespace != n.Namespace || o.Name != n.Name || o.UID != n.UID {
		return nil, fmt.Errorf("%w: the record of the previous layout names %s, not %s: not migrated", ErrInvalidRecord, o, n)
	}
	if !l.key.verify(q, a, a.Salt) {
		return nil, fmt.Errorf("%w: %s: the deployment's answer does not verify with this operator's key: the record of the previous layout is not migrated", ErrNotProven, n)
	}
	if a.Deployment != old.Deployment {
		return nil, fmt.Errorf("%w: the record of the previous layout of %s is for deployment %q, the connection reaches deployment %q: not migrated", ErrNotProven, n, old.Deployment, a.Deployment)
	}
	now := l.clock.Now()
	created := old.CreatedAt
	if created.IsZero() || created.After(now) {
		created = now
	}
	var ids []string
	if q.Tag == Tag(n) {
		ids = slices.Clone(a.Tagged)
	}
	r := &Record{
		Schema: SchemaVersion, Owner: n, Policy: p.Policy, Deployment: a.Deployment, Salt: a.Salt,
		Tag: Tag(n), ExternalIDs: ids, CreatedAt: created, LastCreateAttempt: now,
		Version: old.Version, // replaces exactly the record read
	}
	p.apply(r)
	l.sign(r)
	if err := l.store.Put(ctx, r); err != nil {
		return nil, err
	}
	l.keep(r)
	return r, nil
}

// Plan is what a record says about its owner besides what the deployment
// reports.
type Plan struct {
	Owner Owner
	// Policy is the owner's deletion policy; "" is PolicyDelete.
	Policy Policy
	// Via is the connection object the owner reaches the service through;
	// nil when its kind has none.
	Via *ConnectionRef
	// NamespaceUID is the UID of the owner's namespace: for Adopt, read
	// live by the caller, since it decides the claim; for a record's own
	// writes a cache's answer will do (a lagging one names a namespace of
	// the name that is gone, so a later claim needs an approval). ""
	// leaves the record's as it is (and makes an adoption need an admin's
	// approval).
	NamespaceUID types.UID
	// Declared are IDs known before the create (see Ledger.Create).
	Declared []string
}

func (p *Plan) check() error {
	if err := p.Owner.validate(); err != nil {
		return err
	}
	if p.Policy == "" {
		p.Policy = PolicyDelete
	}
	if !p.Policy.valid() {
		return fmt.Errorf("ledger: owner %s: deletion policy %q is neither %s nor %s", p.Owner, p.Policy, PolicyDelete, PolicyRetain)
	}
	if slices.Contains(p.Declared, "") {
		return fmt.Errorf("ledger: owner %s: declared IDs %q must be non-empty", p.Owner, p.Declared)
	}
	return nil
}

// apply brings r's policy and connection in line with p and reports
// whether anything changed.
func (p Plan) apply(r *Record) bool {
	changed := false
	if r.Policy != p.Policy {
		r.Policy, changed = p.Policy, true
	}
	if p.Via != nil && (r.Via == nil || *r.Via != *p.Via) {
		v := *p.Via
		r.Via, changed = &v, true
	}
	if p.NamespaceUID != "" && r.NamespaceUID != p.NamespaceUID {
		r.NamespaceUID, changed = p.NamespaceUID, true
	}
	return r.merge(p.Declared) || changed
}

// Create ensures the owner's external resources exist and are recorded:
//
//  1. it asks conn to prove its deployment, enrolling a sentinel if the
//     deployment has none, and to list what already carries the owner's
//     tag; the answer is checked against the operator's key;
//  2. it writes the record (policy, connection, declared IDs, this
//     attempt's time), or refreshes it, and stops with ErrRecordWrite if
//     that write fails, before anything external;
//  3. what already carries the tag (an earlier attempt whose answer was
//     lost) is adopted instead of created;
//  4. otherwise it calls create with the tag and records the returned IDs.
//
// IDs known before the create (a name from the spec) go in p.Declared:
// they are in the write before the create, so a create returning exactly
// them needs no second write. Declare only IDs whose Delete checks the tag,
// because a recorded ID is deleted even when the create never made it.
//
// An existing record of another deployment stops it with ErrNotProven: what
// the owner created there must be cleaned up through that deployment first.
// When create fails its error is returned and the record stays, so the
// sweeper can resolve the attempt by tag if the owner goes away. While an
// earlier attempt whose outcome this ledger did not see may still complete
// in the service (Options.CreateLanding) and nothing carries the tag yet,
// Create calls nothing and returns an *InDoubtError: the retry waits, so
// it never makes a second resource.
func (l *Ledger) Create(ctx context.Context, p Plan, conn Prover, create CreateFunc) (*Record, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	tag := Tag(p.Owner)
	q := l.key.question(tag)
	q.Enroll = l.key.enrollment()
	a, err := ask(ctx, conn, q)
	if err != nil {
		return nil, err
	}
	now := l.clock.Now()
	mutate := func(r *Record) (bool, error) {
		if r == nil {
			if !l.key.verify(q, a, a.Salt) {
				return false, fmt.Errorf("%w: %s: the deployment's answer does not verify with this operator's key (a sentinel made by another key, or not the service it claims to be)", ErrNotProven, p.Owner)
			}
			return true, nil
		}
		if err := l.proves(r, q, a); err != nil {
			return false, err
		}
		if len(a.Tagged) == 0 {
			// Nothing carries the tag: an earlier attempt still running in
			// the service would make a second resource beside this one's.
			if err := l.inDoubt(r); err != nil {
				return false, err
			}
		}
		p.apply(r)
		// A replica whose clock is behind the last attempt's never moves it
		// back (a record whose attempt precedes its creation is invalid).
		r.LastCreateAttempt = latest(now, r.LastCreateAttempt)
		return true, nil
	}
	fresh := func() *Record {
		r := &Record{
			Schema: SchemaVersion, Owner: p.Owner, Policy: p.Policy, Deployment: a.Deployment, Salt: a.Salt,
			Tag: tag, ExternalIDs: slices.Clone(p.Declared), CreatedAt: now, LastCreateAttempt: now,
		}
		p.apply(r)
		return r
	}
	rec, err := l.update(ctx, p.Owner.UID, nil, mutate, fresh)
	if errors.Is(err, ErrLegacyRecord) {
		// The previous release's record of this owner: migrated with this
		// proof (the answer lists what carries the tag), then written as
		// any existing record is.
		if _, err = l.migrate(ctx, p, q, a); err == nil {
			rec, err = l.update(ctx, p.Owner.UID, nil, mutate, fresh)
		}
	}
	if err != nil {
		if errors.Is(err, ErrNotProven) || errors.Is(err, ErrInvalidRecord) || errors.Is(err, ErrCreateInDoubt) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrRecordWrite, err)
	}
	ids := a.Tagged
	if len(ids) == 0 {
		ids, err = l.create(ctx, rec, create)
		if l.answered(ctx, err) {
			l.settle(p.Owner.UID, rec.LastCreateAttempt)
		}
		if err != nil {
			// Keep whatever IDs a partial create returned; the tag covers
			// the rest. The create's error is what the caller needs.
			if ids = slices.DeleteFunc(ids, func(s string) bool { return s == "" }); len(ids) > 0 {
				if r, rerr := l.record(ctx, rec, p.Owner.UID, ids, time.Time{}); rerr == nil {
					rec = r
				}
			}
			return rec, err
		}
	}
	return l.record(ctx, rec, p.Owner.UID, ids, time.Time{})
}

// create calls create for rec, bounded by the create timeout counted from
// rec's attempt time.
func (l *Ledger) create(ctx context.Context, rec *Record, create CreateFunc) ([]string, error) {
	// A create left less than half its timeout by a slow proof or record
	// write is not sent: the retry writes a new attempt time, rather than
	// one create after another abandoned at once and each in doubt.
	left := l.createTimeout - l.clock.Since(rec.LastCreateAttempt)
	if left < l.createTimeout/2 {
		return nil, fmt.Errorf("%w: the record write took more than half the create timeout (%s)", ErrNotSent, l.createTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	return create(ctx, rec.Tag)
}

// Observe records ids seen in the deployment conn reaches, for an owner whose
// record exists; conn must prove the record's deployment. The record is
// rewritten when an ID is new or when attempt is newer than the recorded
// create attempt, even if the IDs are unchanged, so that the settle window
// never counts from an older attempt. A zero attempt leaves the time alone.
func (l *Ledger) Observe(ctx context.Context, uid types.UID, conn Prover, ids []string, attempt time.Time) (*Record, error) {
	r, err := l.Current(ctx, uid)
	if err != nil {
		return nil, err
	}
	if err := l.prove(ctx, r, conn, "", "before recording IDs"); err != nil {
		return nil, err
	}
	return l.record(ctx, r, uid, ids, attempt)
}

// Ensure makes sure the record of a live owner exists and says what p and
// ids say, for resources the owner's reconciler found carrying its tag: it
// writes only when something differs (a policy changed in the spec, a
// connection re-created, a new ID). A record that vanished out of band (its
// namespace reinstalled, an admin's mistake) is written again, after conn
// proves its deployment, so that a later release cannot leak silently;
// recreated reports that.
func (l *Ledger) Ensure(ctx context.Context, p Plan, conn Prover, ids []string) (rec *Record, recreated bool, err error) {
	if err := p.check(); err != nil {
		return nil, false, err
	}
	r, err := l.Get(ctx, p.Owner.UID)
	if errors.Is(err, ErrLegacyRecord) {
		r, err = l.Migrate(ctx, p, conn)
	}
	switch {
	case errors.Is(err, ErrNotFound):
		l.drop(p.Owner.UID)
		q := l.key.question("")
		a, err := ask(ctx, conn, q)
		if err != nil {
			return nil, false, err
		}
		if !l.key.verify(q, a, a.Salt) {
			return nil, false, fmt.Errorf("%w: %s: the deployment's answer does not verify with this operator's key", ErrNotProven, p.Owner)
		}
		now := l.clock.Now()
		r := &Record{
			Schema: SchemaVersion, Owner: p.Owner, Policy: p.Policy, Deployment: a.Deployment, Salt: a.Salt,
			Tag: Tag(p.Owner), CreatedAt: now, LastCreateAttempt: now,
		}
		p.apply(r)
		r.merge(ids)
		l.sign(r)
		if err := l.store.Put(ctx, r); err != nil {
			return nil, false, err
		}
		l.keep(r)
		return r, true, nil
	case err != nil:
		return nil, false, err
	}
	if slices.ContainsFunc(ids, func(id string) bool { return !slices.Contains(r.ExternalIDs, id) }) {
		// New IDs must come from the record's deployment.
		if err := l.prove(ctx, r, conn, "", "before recording IDs"); err != nil {
			return nil, false, err
		}
	}
	rec, err = l.update(ctx, p.Owner.UID, r, func(r *Record) (bool, error) {
		if r == nil {
			return false, fmt.Errorf("%w for uid %s", ErrNotFound, p.Owner.UID)
		}
		return p.apply(r) || r.merge(ids), nil
	}, nil)
	return rec, false, err
}

// Adopt moves the record of a previous owner to p.Owner: the same kind,
// namespace and name with another UID (an object restored from a backup
// or re-created by GitOps). The caller has confirmed, live, that no object
// with the previous UID exists. conn must prove the record's deployment.
// In this order, so that a crash at any point leaves a state the next
// attempt finishes and the sweeper never deletes:
//
//  1. a record for p.Owner holding the previous record's deployment and IDs
//     plus what carries the previous tag;
//  2. retag moves every one of those resources from the previous tag to
//     the new one;
//  3. the previous record is removed without deleting anything.
//
// Every step may be repeated: while the previous record exists the
// adoption is unfinished, and calling Adopt again resumes it (the record
// of step 1 is updated, retag must accept resources already moved).
//
// Names are not enough to hand resources over, so the claim is also bound
// to where the resources came from and to the tenancy they belong to:
//
//   - a previous record of another kind, namespace or name is
//     ErrNotAdoptable;
//   - a previous record created through a connection object (Record.Via)
//     passes only to an owner whose connection (p.Via) has the same group,
//     kind, namespace and name: ErrOtherConnection (its UID may differ: a
//     restore re-creates it);
//   - for a namespaced owner, the namespace must be the very one the
//     record was written in: p.NamespaceUID (read live by the caller) equal
//     to Record.NamespaceUID. Otherwise (the namespace was deleted and
//     created again under its name, by a restore or by anyone who may
//     create namespaces; or either UID is unknown) an admin must approve:
//     AnnotationApproval on the previous record naming p.Owner.UID. Else
//     ErrNeedsApproval.
func (l *Ledger) Adopt(ctx context.Context, from types.UID, p Plan, conn Prover, retag func(ctx context.Context, ids []string, from, to string) error) (*Record, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	old, err := l.Get(ctx, from)
	if err != nil {
		return nil, err
	}
	o, n := old.Owner, p.Owner
	if o.GroupVersionKind().GroupKind() != n.GroupVersionKind().GroupKind() || o.Namespace != n.Namespace || o.Name != n.Name || o.UID == n.UID {
		return nil, fmt.Errorf("%w: the record of %s cannot pass to %s: only an object of the same kind, namespace and name, with another UID, adopts", ErrNotAdoptable, o, n)
	}
	if err := adoptable(old, p); err != nil {
		return nil, err
	}
	q := l.key.question(old.Tag)
	a, err := ask(ctx, conn, q)
	if err != nil {
		return nil, err
	}
	if err := l.proves(old, q, a); err != nil {
		return nil, err
	}
	ids := slices.Clone(old.ExternalIDs)
	for _, id := range a.Tagged {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	now := l.clock.Now()
	rec, err := l.update(ctx, n.UID, nil, func(r *Record) (bool, error) {
		if r == nil {
			return true, nil
		}
		if r.Deployment != old.Deployment || r.Salt != old.Salt {
			return false, fmt.Errorf("%w: %s already has a record in deployment %s", ErrNotProven, n, r.Deployment)
		}
		return p.apply(r) || r.merge(ids), nil
	}, func() *Record {
		r := &Record{
			Schema: SchemaVersion, Owner: n, Policy: p.Policy, Deployment: old.Deployment, Salt: old.Salt,
			Tag: Tag(n), ExternalIDs: ids, CreatedAt: now, LastCreateAttempt: latest(now, old.LastCreateAttempt),
		}
		p.apply(r)
		return r
	})
	if err != nil {
		return nil, err
	}
	if err := retag(ctx, ids, old.Tag, rec.Tag); err != nil {
		return rec, fmt.Errorf("ledger: move %q from tag %s to %s: %w", ids, old.Tag, rec.Tag, err)
	}
	l.drop(from)
	if err := l.store.Delete(ctx, old); err != nil {
		return rec, err
	}
	return rec, nil
}

// adoptable checks what binds old to p beyond names: the connection it was
// created through and the namespace it was written in, or an admin's
// approval.
func adoptable(old *Record, p Plan) error {
	if v := old.Via; v != nil {
		w := p.Via
		if w == nil || w.GroupVersionKind().GroupKind() != v.GroupVersionKind().GroupKind() || w.Namespace != v.Namespace || w.Name != v.Name {
			return fmt.Errorf("%w: the record of %s was created through %s %s/%s, %s reaches the service through %s", ErrOtherConnection, old.Owner, v.Kind, v.Namespace, v.Name, p.Owner, w)
		}
	}
	if old.ClaimApproved(p.Owner.UID, p.NamespaceUID) {
		return nil
	}
	return fmt.Errorf("%w: the record of %s was written in namespace %s with uid %q, %s is in a namespace with uid %q; to let it adopt, annotate the record %s=%s",
		ErrNeedsApproval, old.Owner, old.Owner.Namespace, old.NamespaceUID, p.Owner, p.NamespaceUID, AnnotationApproval, p.Owner.UID)
}

// ClaimApproved reports whether an object with UID claimant, in a
// namespace with UID namespaceUID (read live by the caller; "" when it
// could not be read), may adopt r as far as the tenancy goes: r's owner is
// cluster-scoped (no namespace to re-create), or the claimant lives in the
// very namespace r was written in, or an admin approved that one object
// (AnnotationApproval naming claimant). Adopt requires it, and the sweeper
// keeps the record of a claim it does not hold for a bounded grace only
// (sweep.Options.ClaimGrace), so the two never disagree on which claims
// wait for an admin. Names, kind and connection are Adopt's other checks.
func (r *Record) ClaimApproved(claimant, namespaceUID types.UID) bool {
	switch {
	case r.Owner.Namespace == "":
		return true
	case r.NamespaceUID != "" && r.NamespaceUID == namespaceUID:
		return true
	case r.Approval != "" && r.Approval == claimant:
		return true
	}
	return false
}

// Current is uid's record as this ledger last wrote it, else read from the
// store and authenticated (as Get). A remembered record can be stale only
// if another writer changed it since, and then only by lacking IDs
// (records only grow): it serves a caller that goes on to Cleanup, whose
// removal is conditional on the remembered version and starts over from
// the store on a conflict. A caller that decides from a record's absence
// gets that from the store: a record is remembered only while it exists
// as far as this ledger knows.
func (l *Ledger) Current(ctx context.Context, uid types.UID) (*Record, error) {
	if r := l.recall(uid); r != nil {
		return r, nil
	}
	return l.Get(ctx, uid)
}

// record adds ids and a newer attempt to uid's record. known, when not nil,
// is the record as this ledger last wrote or read it: it is tried first,
// without a read, and a conflict falls back to reading.
func (l *Ledger) record(ctx context.Context, known *Record, uid types.UID, ids []string, attempt time.Time) (*Record, error) {
	if slices.Contains(ids, "") {
		return nil, fmt.Errorf("ledger: empty external ID in %q", ids)
	}
	return l.update(ctx, uid, known, func(r *Record) (bool, error) {
		if r == nil {
			return false, fmt.Errorf("%w for uid %s: create the record (Ledger.Create) before creating anything", ErrNotFound, uid)
		}
		if known != nil && (r.Deployment != known.Deployment || r.Salt != known.Salt) {
			return false, fmt.Errorf("%w: record %s is now for deployment %s, the IDs come from %s", ErrNotProven, uid, r.Deployment, known.Deployment)
		}
		changed := r.merge(ids)
		if attempt.After(r.LastCreateAttempt) {
			r.LastCreateAttempt = attempt
			changed = true
		}
		return changed, nil
	}, nil)
}

// update lets mutate change the record (r is nil when there is none; then
// fresh, if not nil, makes one) and writes it, signed, when mutate reports a
// change, retrying on conflicts. The first attempt reads nothing when it
// can guess: from known (the record as this ledger last wrote it, so its
// version is the one the write is conditional on), or, with fresh and no
// known, that there is no record yet (the create is conditional on that).
// A wrong guess costs one conflicting write and then reads, as every retry
// does. A guess that needs no write returns known unchanged: nothing newer
// than what the ledger itself wrote can lack what mutate would add, because
// records only grow. Records read from the store are authenticated first.
func (l *Ledger) update(ctx context.Context, uid types.UID, known *Record, mutate func(r *Record) (bool, error), fresh func() *Record) (*Record, error) {
	var err error
	if known == nil {
		known = l.recall(uid)
	}
	guess := known != nil || fresh != nil
	for attempt := range conflictRetries + 1 {
		var r *Record
		switch {
		case attempt == 0 && known != nil:
			r = known.DeepCopy()
		case attempt == 0 && guess:
			r = nil
		case attempt == 0:
			continue // no guess: the read attempts below
		default:
			r, err = l.Get(ctx, uid)
			switch {
			case errors.Is(err, ErrNotFound):
				r = nil
			case err != nil:
				return nil, err
			}
		}
		changed, merr := mutate(r)
		if merr != nil {
			return nil, merr
		}
		if r == nil {
			if fresh == nil {
				return nil, fmt.Errorf("%w for uid %s", ErrNotFound, uid)
			}
			r = fresh()
			changed = true
		}
		if !changed {
			return r, nil
		}
		l.sign(r)
		if err = l.store.Put(ctx, r); err == nil {
			l.keep(r)
			return r, nil
		}
		l.drop(uid)
		if !errors.Is(err, ErrConflict) {
			return nil, err
		}
	}
	return nil, err
}

// CleanupResult says what Cleanup did.
type CleanupResult struct {
	// Deleted are the IDs whose delete the deployment answered.
	Deleted []string
	// Removed reports that the record was removed.
	Removed bool
}

// Cleanup deletes everything recorded for uid through t and then removes the
// record, in this order:
//
//  1. t proves the record's deployment, answering a fresh challenge from
//     inside the service, and lists what carries the record's tag, before
//     anything else, including for a record with no IDs;
//  2. every recorded ID and every resource carrying the tag is deleted; a
//     delete error other than not-found stops here;
//  3. t answers a second fresh challenge, whose answer must say that
//     nothing carries the tag any more: the first proof and the deletes are
//     separate requests that may reach different backends (a switch-over,
//     or a proxy splicing the session onto another server), and only an
//     answer computed with the deployment's token can say "gone";
//  4. the record is removed only if nobody changed it meanwhile.
//
// While the last create attempt may still complete in the service and
// nothing carries the tag, it deletes nothing and returns an
// *InDoubtError: removing the record then would let the create land with
// nothing left that names it.
//
// A missing record is (CleanupResult{}, nil); an invalid or unauthenticated
// one is an error wrapping ErrInvalidRecord and is left alone.
func (l *Ledger) Cleanup(ctx context.Context, uid types.UID, t Target) (CleanupResult, error) {
	if r := l.recall(uid); r != nil {
		res, err := l.cleanup(ctx, r, t)
		if !errors.Is(err, ErrConflict) {
			return res, err
		}
		// Someone else changed the record since this ledger wrote it:
		// start over from what is stored.
	}
	r, err := l.Get(ctx, uid)
	if errors.Is(err, ErrNotFound) {
		return CleanupResult{}, nil
	}
	if err != nil {
		return CleanupResult{}, err
	}
	return l.cleanup(ctx, r, t)
}

func (l *Ledger) cleanup(ctx context.Context, r *Record, t Target) (CleanupResult, error) {
	var res CleanupResult
	q := l.key.question(r.Tag)
	a, err := ask(ctx, t, q)
	if err != nil {
		return res, fmt.Errorf("ledger: prove deployment before deleting: %w", err)
	}
	if err := l.proves(r, q, a); err != nil {
		return res, fmt.Errorf("before deleting: %w", err)
	}
	if len(a.Tagged) == 0 {
		// A create still running in the service would land after the
		// record is gone, with nothing left that names it.
		if err := l.inDoubt(r); err != nil {
			return res, err
		}
	}
	ids := slices.Clone(r.ExternalIDs)
	for _, id := range a.Tagged {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if err := t.Delete(ctx, id, r.Tag); err != nil && l.class.Classify(ctx, err) != errclass.NotFound {
			return res, fmt.Errorf("ledger: delete %s for %s: %w", id, r.Owner, err)
		}
		res.Deleted = append(res.Deleted, id)
	}
	q = l.key.question(r.Tag)
	if a, err = ask(ctx, t, q); err != nil {
		return res, fmt.Errorf("ledger: prove deployment after deleting: %w", err)
	}
	if err := l.proves(r, q, a); err != nil {
		return res, fmt.Errorf("after deleting: %w", err)
	}
	if len(a.Tagged) > 0 {
		return res, fmt.Errorf("ledger: the deployment says resources tagged %s remain after delete: %q", r.Tag, a.Tagged)
	}
	err = l.store.Delete(ctx, r)
	l.drop(r.Owner.UID)
	if err != nil {
		return res, err
	}
	res.Removed = true
	return res, nil
}

// Prove asks t to prove r's deployment with a fresh challenge and reports
// why it does not, in words an admin can act on; nil when it does.
func (l *Ledger) Prove(ctx context.Context, r *Record, t Prover) error {
	return l.prove(ctx, r, t, "", "")
}

func (l *Ledger) prove(ctx context.Context, r *Record, t Prover, tag, when string) error {
	q := l.key.question(tag)
	a, err := ask(ctx, t, q)
	if err != nil {
		return err
	}
	if err := l.proves(r, q, a); err != nil {
		if when != "" {
			return fmt.Errorf("%s: %w", when, err)
		}
		return err
	}
	return nil
}

// proves explains how a fails to answer q for r's deployment; nil when it
// answers.
func (l *Ledger) proves(r *Record, q Question, a Answer) error {
	switch {
	case a.Deployment != r.Deployment:
		return fmt.Errorf("%w: record of %s is for deployment %q, the connection reaches deployment %q", ErrNotProven, r.Owner, r.Deployment, a.Deployment)
	case a.Salt != r.Salt:
		return fmt.Errorf("%w: record of %s: the connection reaches deployment %q, but its sentinel (salt %s) is not the one the record was written with (salt %s): the sentinel was re-created, or the connection reaches another database of the service",
			ErrNotProven, r.Owner, a.Deployment, a.Salt, r.Salt)
	case !l.key.verify(q, a, r.Salt):
		return fmt.Errorf("%w: record of %s: the connection claims deployment %q and its sentinel, but its answer to a fresh challenge does not verify: it does not hold the deployment's token", ErrNotProven, r.Owner, a.Deployment)
	}
	return nil
}

// ask puts q to p; nil p is an error, not a panic.
func ask(ctx context.Context, p Prover, q Question) (Answer, error) {
	if p == nil {
		return Answer{}, fmt.Errorf("%w: nil connection", ErrNotProven)
	}
	a, err := p.Prove(ctx, q)
	if err != nil {
		return Answer{}, fmt.Errorf("ledger: prove deployment: %w", err)
	}
	if slices.Contains(a.Tagged, "") {
		return Answer{}, fmt.Errorf("%w: the answer lists an empty ID", ErrNotProven)
	}
	return a, nil
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
