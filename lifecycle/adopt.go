package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/finale-dev/finale/ledger"
)

// adoption is what an object took over from its predecessor.
type adoption struct {
	uid types.UID
	ids []string
}

// Reasons an adoption is refused; they are NeedsAction reasons, so the
// object says what to do and nothing is created meanwhile.
var (
	errAdoptionRefused     = errors.New("lifecycle: adoption refused")
	errAdoptionUnsupported = errors.New("lifecycle: adoption unsupported")
)

// adopt handles an object whose AnnotationUID names another UID: restored
// from a backup (annotations survive a restore, UIDs do not) or written so
// in a manifest. It takes over that UID's record and resources when the
// record is authentic, of the same kind, namespace and name, and its
// deployment is the one this connection reaches (ledger.Adopt checks
// both); the predecessor is gone, because this object now holds its name.
// Nothing is created while a claim is unresolved: a restored object that
// created afresh would either collide with its own old resource or
// duplicate it.
//
// It returns nil, nil when the object already has its own record (an
// adoption finished before a crash, or a stale annotation): only the
// annotation is left to fix.
func (r *Reconciler[O, K, C]) adopt(ctx context.Context, c C, obj O, conn Connection[K], claim string) (*adoption, error) {
	if claim == "" {
		return nil, nil // an object that predates the annotation
	}
	if _, err := r.o.Ledger.Get(ctx, obj.GetUID()); err == nil {
		return nil, nil
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return nil, err
	}
	from := types.UID(claim)
	rt, ok := r.adapter.(Retagger[C])
	if !ok {
		return nil, &NeedsAction{Reason: ReasonAdoptionUnsupported, Err: fmt.Errorf("%w: "+MessageAdoptionUnsup, errAdoptionUnsupported, from)}
	}
	if err := r.confirmLive(ctx, obj, conn); err != nil {
		return nil, err
	}
	rec, err := r.o.Ledger.Adopt(ctx, from, r.plan(obj, conn), r.prover(c), func(ctx context.Context, ids []string, fromTag, toTag string) error {
		for _, id := range ids {
			if err := rt.Retag(ctx, c, id, fromTag, toTag); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case err == nil:
	case errors.Is(err, ledger.ErrNotFound), errors.Is(err, ledger.ErrNotAdoptable), errors.Is(err, ledger.ErrNotProven), errors.Is(err, ledger.ErrInvalidRecord):
		return nil, &NeedsAction{Reason: ReasonAdoptionRefused, Err: fmt.Errorf("%w: "+MessageAdoptionRefused+" (%s)", errAdoptionRefused, from, short(err))}
	default:
		return nil, err
	}
	return &adoption{uid: from, ids: rec.ExternalIDs}, nil
}

// short names which check refused, without the service's details.
func short(err error) string {
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return "no cleanup record for that uid"
	case errors.Is(err, ledger.ErrNotAdoptable):
		return "the record is of another kind, namespace or name"
	case errors.Is(err, ledger.ErrNotProven):
		return "the record's deployment is not the one this connection reaches"
	case errors.Is(err, ledger.ErrInvalidRecord):
		return "the record is invalid or not signed by this operator"
	}
	return strings.TrimSpace(err.Error())
}
