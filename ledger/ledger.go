package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/finale-dev/finale/errclass"
)

// Identifier reads the identity of the deployment a connection reaches, live.
type Identifier interface {
	Identify(ctx context.Context) (Identity, error)
}

// Conn is what Create needs from a connection to the external service.
type Conn interface {
	Identifier
	// FindByTag returns the IDs of the resources carrying tag, none if none.
	FindByTag(ctx context.Context, tag string) ([]string, error)
}

// Target is what Cleanup (and the sweeper) need: a Conn that can also delete
// one resource by its exact ID. Delete returns nil when the resource is gone,
// including when it was already gone; an error the errclass classifier puts
// in NotFound counts as gone too.
type Target interface {
	Conn
	Delete(ctx context.Context, id string) error
}

// TargetFuncs adapts three functions to Target.
type TargetFuncs struct {
	IdentifyFn  func(ctx context.Context) (Identity, error)
	FindByTagFn func(ctx context.Context, tag string) ([]string, error)
	DeleteFn    func(ctx context.Context, id string) error
}

// Identify implements Identifier.
func (f TargetFuncs) Identify(ctx context.Context) (Identity, error) { return f.IdentifyFn(ctx) }

// FindByTag implements Conn.
func (f TargetFuncs) FindByTag(ctx context.Context, tag string) ([]string, error) {
	return f.FindByTagFn(ctx, tag)
}

// Delete implements Target.
func (f TargetFuncs) Delete(ctx context.Context, id string) error { return f.DeleteFn(ctx, id) }

// CreateFunc creates the owner's external resources, putting tag on each, and
// returns their IDs. It is called only after the record is durably written.
type CreateFunc func(ctx context.Context, tag string) ([]string, error)

// Options tune a Ledger. The zero value is usable.
type Options struct {
	// Clock stamps created-at and create-attempt times; nil is the real clock.
	Clock clock.PassiveClock
	// Classifier decides which Delete errors mean "not found"; nil is
	// errclass.Default.
	Classifier *errclass.Classifier
	// Remember bounds how many records the ledger keeps in memory as it
	// last wrote them (see Ledger); zero is DefaultRemember, negative
	// keeps none.
	Remember int
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
	clock    clock.PassiveClock
	class    *errclass.Classifier
	remember int

	mu  sync.Mutex // guards mem
	mem map[types.UID]*Record
}

// conflictRetries bounds the read-modify-write loops: a record has one writer
// in practice (the owner's reconcile, or the leader's sweeper), so repeated
// conflicts mean something is wrong and the caller should requeue.
const conflictRetries = 3

// New returns a Ledger over store.
func New(store Store, opts Options) *Ledger {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Classifier == nil {
		opts.Classifier = errclass.Default
	}
	if opts.Remember == 0 {
		opts.Remember = DefaultRemember
	}
	return &Ledger{store: store, clock: opts.Clock, class: opts.Classifier, remember: opts.Remember, mem: map[types.UID]*Record{}}
}

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

// Forget removes uid's record without deleting anything it covers: for an
// owner whose resources are to be retained, so that the sweeper never
// deletes them either. A missing record is not an error.
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

// Store returns the ledger's store.
func (l *Ledger) Store() Store { return l.store }

// Create ensures owner's external resources exist and are recorded:
//
//  1. it reads the deployment identity from conn (never from user input);
//  2. it writes the record, or refreshes its create-attempt time, and stops
//     with ErrRecordWrite if that write fails, before anything external;
//  3. it looks for resources already carrying the owner's tag (an earlier
//     attempt whose answer was lost) and adopts them instead of creating;
//  4. otherwise it calls create with the tag and records the returned IDs.
//
// An existing record of another deployment stops it with ErrNotProven: what
// the owner created there must be cleaned up through that deployment first.
// When create fails its error is returned and the record stays, so the
// sweeper can resolve the attempt by tag if the owner goes away.
func (l *Ledger) Create(ctx context.Context, owner Owner, conn Conn, create CreateFunc) (*Record, error) {
	return l.create(ctx, owner, conn, nil, create)
}

// CreateDeclared is Create for a caller that knows, before creating, the
// IDs the create will return (a name the caller chooses, for example): the
// declared IDs go into the write-ahead record together with the attempt
// time, so that a create returning exactly them needs no second write. IDs
// the create returns that were not declared are recorded after it, as with
// Create; a declared ID that never comes to exist stays recorded, and
// Cleanup and the sweeper then find it already gone.
//
// Declare only IDs whose delete cannot reach someone else's resource: a
// Target's Delete must check the ownership tag, or the ID must be unique to
// the owner, because a recorded ID is deleted even when this owner's create
// never made it.
func (l *Ledger) CreateDeclared(ctx context.Context, owner Owner, conn Conn, declared []string, create CreateFunc) (*Record, error) {
	if len(declared) == 0 || slices.Contains(declared, "") {
		return nil, fmt.Errorf("ledger: CreateDeclared for %s: declared IDs %q must be non-empty (use Create when the IDs are not known before the create)", owner, declared)
	}
	return l.create(ctx, owner, conn, declared, create)
}

func (l *Ledger) create(ctx context.Context, owner Owner, conn Conn, declared []string, create CreateFunc) (*Record, error) {
	if err := owner.validate(); err != nil {
		return nil, err
	}
	id, err := identify(ctx, conn)
	if err != nil {
		return nil, err
	}
	now := l.clock.Now()
	// The attempt time set here is the follow-up 9 rewrite: it is part of
	// the write-ahead write, so the write after the create has nothing left
	// to add when the IDs were declared.
	rec, err := l.update(ctx, owner.UID, nil, func(r *Record) (bool, error) {
		if r == nil {
			return true, nil
		}
		if !Proves(id, r.Deployment, r.Proof) {
			return false, fmt.Errorf("%w: %s was recorded in deployment %s, connection reaches %s", ErrNotProven, owner, r.Deployment, id.Deployment)
		}
		r.merge(declared)
		r.LastCreateAttempt = now
		return true, nil
	}, func() *Record {
		return &Record{
			Schema: SchemaVersion, Owner: owner, Deployment: id.Deployment, Proof: Commit(id),
			Tag: Tag(owner), ExternalIDs: slices.Clone(declared), CreatedAt: now, LastCreateAttempt: now,
		}
	})
	if err != nil {
		if errors.Is(err, ErrNotProven) || errors.Is(err, ErrInvalidRecord) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrRecordWrite, err)
	}
	found, err := conn.FindByTag(ctx, rec.Tag)
	if err != nil {
		return rec, fmt.Errorf("ledger: look for resources tagged %s before creating: %w", rec.Tag, err)
	}
	ids := found
	if len(found) == 0 {
		if ids, err = create(ctx, rec.Tag); err != nil {
			// Keep whatever IDs a partial create returned; the tag covers
			// the rest. The create's error is what the caller needs.
			if ids = slices.DeleteFunc(ids, func(s string) bool { return s == "" }); len(ids) > 0 {
				if r, rerr := l.record(ctx, rec, owner.UID, id, ids, now); rerr == nil {
					rec = r
				}
			}
			return rec, err
		}
	}
	return l.record(ctx, rec, owner.UID, id, ids, now)
}

// Observe records ids seen in the deployment conn reaches, for an owner whose
// record exists. The record is rewritten when an ID is new or when attempt is
// newer than the recorded create attempt, even if the IDs are unchanged, so
// that the settle window never counts from an older attempt (for callers that
// keep the attempt time in the owner's status as well). A zero attempt leaves
// the time alone.
func (l *Ledger) Observe(ctx context.Context, uid types.UID, conn Identifier, ids []string, attempt time.Time) (*Record, error) {
	id, err := identify(ctx, conn)
	if err != nil {
		return nil, err
	}
	return l.record(ctx, nil, uid, id, ids, attempt)
}

// record adds ids and a newer attempt to uid's record. known, when not nil,
// is the record as this ledger last wrote it: it is tried first, without a
// read, and a conflict falls back to reading.
func (l *Ledger) record(ctx context.Context, known *Record, uid types.UID, id Identity, ids []string, attempt time.Time) (*Record, error) {
	if slices.Contains(ids, "") {
		return nil, fmt.Errorf("ledger: empty external ID in %q", ids)
	}
	return l.update(ctx, uid, known, func(r *Record) (bool, error) {
		if r == nil {
			return false, fmt.Errorf("%w for uid %s: create the record (Ledger.Create) before creating anything", ErrNotFound, uid)
		}
		if !Proves(id, r.Deployment, r.Proof) {
			return false, fmt.Errorf("%w: record %s is for deployment %s, IDs come from %s", ErrNotProven, uid, r.Deployment, id.Deployment)
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
// fresh, if not nil, makes one) and writes it when mutate reports a change,
// retrying on conflicts. The first attempt reads nothing when it can guess:
// from known (the record as this ledger last wrote it, so its version is
// the one the write is conditional on), or, with fresh and no known, that
// there is no record yet (the create is conditional on that). A wrong guess
// costs one conflicting write and then reads, as every retry does. A guess
// that needs no write returns known unchanged: nothing newer than what the
// ledger itself wrote can lack what mutate would add, because records only
// grow.
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
			r, err = l.store.Get(ctx, uid)
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
	// Deleted are the IDs the deployment confirmed gone.
	Deleted []string
	// Removed reports that the record was removed.
	Removed bool
}

// Cleanup deletes everything recorded for uid through t and then removes the
// record, in this order:
//
//  1. t must prove the record's deployment (identity and token), before
//     anything else, including for a record with no IDs;
//  2. every recorded ID and every resource carrying the record's tag is
//     deleted; a delete error other than not-found stops here;
//  3. t must prove the deployment again, because the first proof and the
//     deletes are separate requests that may reach different backends while
//     the service switches over; and no tagged resource may remain;
//  4. the record is removed only if nobody changed it meanwhile.
//
// A missing record is (CleanupResult{}, nil); an invalid one is an error
// wrapping ErrInvalidRecord and is left alone.
func (l *Ledger) Cleanup(ctx context.Context, uid types.UID, t Target) (CleanupResult, error) {
	if r := l.recall(uid); r != nil {
		res, err := l.cleanup(ctx, r, t)
		if !errors.Is(err, ErrConflict) {
			return res, err
		}
		// Someone else changed the record since this ledger wrote it:
		// start over from what is stored.
	}
	r, err := l.store.Get(ctx, uid)
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
	if err := l.prove(ctx, r, t, "before deleting"); err != nil {
		return res, err
	}
	tagged, err := t.FindByTag(ctx, r.Tag)
	if err != nil {
		return res, fmt.Errorf("ledger: find resources tagged %s: %w", r.Tag, err)
	}
	ids := slices.Clone(r.ExternalIDs)
	for _, id := range tagged {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if err := t.Delete(ctx, id); err != nil && l.class.Classify(ctx, err) != errclass.NotFound {
			return res, fmt.Errorf("ledger: delete %s for %s: %w", id, r.Owner, err)
		}
		res.Deleted = append(res.Deleted, id)
	}
	if err := l.prove(ctx, r, t, "after deleting"); err != nil {
		return res, err
	}
	left, err := t.FindByTag(ctx, r.Tag)
	if err != nil {
		return res, fmt.Errorf("ledger: confirm no resource tagged %s remains: %w", r.Tag, err)
	}
	if len(left) > 0 {
		return res, fmt.Errorf("ledger: resources tagged %s remain after delete: %q", r.Tag, left)
	}
	err = l.store.Delete(ctx, r)
	l.drop(r.Owner.UID)
	if err != nil {
		return res, err
	}
	res.Removed = true
	return res, nil
}

func (l *Ledger) prove(ctx context.Context, r *Record, t Identifier, when string) error {
	id, err := t.Identify(ctx)
	if err != nil {
		return fmt.Errorf("ledger: identify deployment %s: %w", when, err)
	}
	if !Proves(id, r.Deployment, r.Proof) {
		return fmt.Errorf("%w %s: record %s wants deployment %s, connection claims %s", ErrNotProven, when, r.Owner.UID, r.Deployment, id.Deployment)
	}
	return nil
}

func identify(ctx context.Context, conn Identifier) (Identity, error) {
	if conn == nil {
		return Identity{}, fmt.Errorf("%w: nil connection", ErrInvalidIdentity)
	}
	id, err := conn.Identify(ctx)
	if err != nil {
		return Identity{}, fmt.Errorf("ledger: identify deployment: %w", err)
	}
	if err := id.validate(); err != nil {
		return Identity{}, err
	}
	return id, nil
}
