package ledger

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// Errors callers can test with errors.Is.
var (
	// ErrNotFound: there is no record for the owner UID.
	ErrNotFound = errors.New("ledger: no cleanup record")
	// ErrConflict: the record changed since it was read; read it again.
	ErrConflict = errors.New("ledger: cleanup record changed concurrently")
	// ErrInvalidRecord: a stored record does not decode or is inconsistent.
	// Such a record is never acted on and never deleted by this package.
	ErrInvalidRecord = errors.New("ledger: invalid cleanup record")
	// ErrInvalidOwner: the Owner passed in lacks a field.
	ErrInvalidOwner = errors.New("ledger: invalid owner")
	// ErrInvalidIdentity: a connection reported an unusable identity.
	ErrInvalidIdentity = errors.New("ledger: invalid deployment identity")
	// ErrNotProven: the connection is not, or could not prove it is, the
	// record's deployment. Nothing was created or removed.
	ErrNotProven = errors.New("ledger: connection does not prove the record's deployment")
	// ErrUnauthenticated: a stored record's MAC does not verify with this
	// operator's key: it was edited, forged, or written by another key. It
	// wraps ErrInvalidRecord: never acted on, never deleted.
	ErrUnauthenticated = fmt.Errorf("%w: not signed by this operator's key", ErrInvalidRecord)
	// ErrLegacyRecord: a stored record of the previous layout
	// (LegacySchemaVersion), unsigned. It wraps ErrInvalidRecord: nothing
	// acts on it until its live owner's reconcile migrates it (Migrate).
	ErrLegacyRecord = fmt.Errorf("%w: a record of the previous layout (schema %d, unsigned)", ErrInvalidRecord, LegacySchemaVersion)
	// ErrNotAdoptable: a record cannot pass to the object that claims it.
	ErrNotAdoptable = errors.New("ledger: record not adoptable")
	// ErrOtherConnection: the claiming object reaches the service through
	// another connection object than the one the record was created
	// through. It wraps ErrNotAdoptable.
	ErrOtherConnection = fmt.Errorf("%w: the claiming object's connection is not the record's", ErrNotAdoptable)
	// ErrNeedsApproval: the claiming object's namespace is not the one the
	// record was written in (deleted and created again, or unknown), and no
	// admin approved the adoption (AnnotationApproval). It wraps
	// ErrNotAdoptable.
	ErrNeedsApproval = fmt.Errorf("%w: the namespace was re-created since the record was written, and no admin approved the adoption", ErrNotAdoptable)
	// ErrRecordWrite: the write-ahead record could not be written, so the
	// create was not called.
	ErrRecordWrite = errors.New("ledger: cleanup record not written, create not attempted")
)

// Store keeps records. Implementations must make Put and Delete conditional
// on Record.Version so that two writers never silently overwrite each other.
type Store interface {
	// Get returns the record for uid: ErrNotFound when there is none, an
	// error wrapping ErrInvalidRecord when it does not decode (then with
	// whatever did decode, if anything: ErrLegacyRecord comes with the
	// legacy record, for Migrate).
	Get(ctx context.Context, uid types.UID) (*Record, error)
	// Put creates the record when r.Version is empty, and otherwise updates
	// it only if it is still at r.Version (else ErrConflict). It sets
	// r.Version to the new version.
	Put(ctx context.Context, r *Record) error
	// Delete removes the record only if it is still at r.Version (else
	// ErrConflict). A record already gone is not an error.
	Delete(ctx context.Context, r *Record) error
	// List returns one page of at most limit records, starting at the
	// continuation token cont ("" for the first page).
	List(ctx context.Context, limit int64, cont string) (Page, error)
}

// Noter is a Store that can keep the sweeper's Note on a stored record
// (ConfigMapStore is one). Note changes only the note, only if the record
// is still at r.Version (else ErrConflict), and updates r.Version and
// r.Note. A Store without it keeps no notes: a restarted sweeper then
// reports its kept records again.
type Noter interface {
	Note(ctx context.Context, r *Record, n Note) error
}

// Page is one page of stored records.
type Page struct {
	Records []*Record
	// Invalid are stored entries that do not decode or fail Record.Check.
	Invalid []Invalid
	// Continue is the token for the next page; "" after the last.
	Continue string
}

// Invalid is a stored entry that is not a usable record.
type Invalid struct {
	// Record holds whatever did decode (possibly little more than Source).
	Record *Record
	Err    error
}
