package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

// ReasonAdoptionNeedsApproval: the claim crosses a namespace that was
// deleted and created again; only an admin may let it through.
const ReasonAdoptionNeedsApproval = "AdoptionNeedsApproval"

// Messages of refused claims, one per cause, each saying what resolves it
// and none suggesting what would create a new resource in place of the
// claimed one. Format verbs: the claimed uid first.
const (
	messageAdoptionNoRecord = "annotation " + AnnotationUID + " claims the resources of uid %s, but no cleanup record of that uid exists, so nothing proves what they are. " +
		"If the sweeper removed it because the claim went unapproved past its deadline (a CleanupClaimExpired Event on this object says so), it deleted the resources too: remove the annotation to create new ones. " +
		"Otherwise an admin can restore the record %s from a backup of the operator's namespace; removing the annotation would make this object create a new resource instead of adopting the old one"
	// messageAdoptionApproval: uid, records namespace, record name, this
	// object's uid.
	messageAdoptionApproval = "annotation " + AnnotationUID + " claims the resources of uid %s, whose cleanup record was written in an earlier namespace of this name (deleted since), or in one whose identity was not recorded: an admin who trusts this claim approves it with: kubectl -n %s annotate configmap %s " + ledger.AnnotationApproval + "=%s"
	// messageApprovalNamespace: records namespace, namespace, its earlier
	// UID. Appended when the record names the earlier namespace.
	messageApprovalNamespace = "; or every claim of this restored namespace at once with: finale approve --records-namespace %s --namespace %s --from-uid %s"
	// messageApprovalDeadline: the sweeper's deadline (its Note on the
	// record); messageApprovalGrace when it has not noted one yet.
	messageApprovalDeadline = ". Unless an admin approves by %s, the sweeper then deletes those resources as a gone owner's"
	// messageApprovalGrace: the default grace.
	messageApprovalGrace = ". Unless an admin approves within the sweeper's grace for unapproved claims (%s at defaults, from its first sight of this claim), the sweeper then deletes those resources as a gone owner's"
	// messageAdoptionConnection: uid, the record's connection kind and name.
	messageAdoptionConnection = "annotation " + AnnotationUID + " claims the resources of uid %s, which were created through %s %q: reference that connection to adopt them"
	messageAdoptionNotProven  = "annotation " + AnnotationUID + " claims the resources of uid %s, but this object's connection does not prove the deployment their cleanup record names: point the connection at that deployment"
	messageAdoptionInvalid    = "annotation " + AnnotationUID + " claims the resources of uid %s, but their cleanup record is invalid or not signed by this operator: an admin must inspect it in the operator's namespace"
)

var namespaceGVK = corev1.SchemeGroupVersion.WithKind("Namespace")

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
// in a manifest. It takes over that UID's record and resources when
// ledger.Adopt allows it: the record is authentic, of the same kind,
// namespace and name, created through a connection of the same name as
// this object's, written in this very namespace (or an admin approved),
// and its deployment is the one this connection reaches. The predecessor
// is gone, because this object now holds its name. Nothing is created
// while a claim is unresolved: a restored object that created afresh would
// either collide with its own old resource or duplicate it.
//
// The claimed record decides whether an adoption is finished: while it
// exists, the adoption is resumed (a transient error or a crash between
// ledger.Adopt's steps leaves this object's own record written and some
// resources still under the old tag; seeing only its own record, a
// reconcile would find nothing under the new tag and create). It returns
// nil, nil when the claimed record is gone and this object has its own:
// an adoption that finished before a crash, or a stale annotation; only
// the annotation is left to fix.
func (r *Reconciler[O, K, C]) adopt(ctx context.Context, x remote[O, K, C], obj O, conn Connection[K], claim string) (*adoption, error) {
	if claim == "" {
		return nil, nil // an object that predates the annotation
	}
	from := types.UID(claim)
	claimed, err := r.o.Ledger.Get(ctx, from)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		if _, err := r.o.Ledger.Get(ctx, obj.GetUID()); err == nil {
			return nil, nil
		} else if !errors.Is(err, ledger.ErrNotFound) && !errors.Is(err, ledger.ErrInvalidRecord) {
			return nil, err
		}
	case err != nil && !errors.Is(err, ledger.ErrInvalidRecord):
		return nil, err
	}
	rt, ok := r.adapter.(Retagger[C])
	if !ok {
		return nil, &NeedsAction{Reason: ReasonAdoptionUnsupported, Err: fmt.Errorf("%w: "+messageAdoptionUnsup, errAdoptionUnsupported, from)}
	}
	if err := r.confirmLive(ctx, obj, conn); err != nil {
		return nil, err
	}
	p, err := r.recordPlan(ctx, obj, conn, true)
	if err != nil {
		return nil, err
	}
	rec, err := r.o.Ledger.Adopt(ctx, from, p, x, func(ctx context.Context, ids []string, fromTag, toTag string) error {
		for _, id := range ids {
			if err := x.retag(ctx, rt, id, fromTag, toTag); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if na := refusal(err, from, claimed, p); na != nil {
			logf.FromContext(ctx).Info("adoption refused", "claimed", from, "reason", na.Reason, "error", err.Error())
			return nil, na
		}
		return nil, err
	}
	return &adoption{uid: from, ids: rec.ExternalIDs}, nil
}

// refusal turns a refused ledger.Adopt into what the user or an admin must
// do; nil for an error that is not a refusal (retried with backoff).
// claimed is the claimed record as read, if anything was.
func refusal(err error, from types.UID, claimed *ledger.Record, p ledger.Plan) *NeedsAction {
	na := &NeedsAction{Reason: ReasonAdoptionRefused, Err: errAdoptionRefused}
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		na.Action = fmt.Sprintf(messageAdoptionNoRecord, from, ledger.ConfigMapName(from))
	case errors.Is(err, ledger.ErrNeedsApproval):
		ns := "<the operator's namespace>"
		if claimed != nil && claimed.Source != nil {
			ns = claimed.Source.Namespace
		}
		na.Reason = ReasonAdoptionNeedsApproval
		na.Action = fmt.Sprintf(messageAdoptionApproval, from, ns, ledger.ConfigMapName(from), p.Owner.UID)
		if claimed != nil && claimed.NamespaceUID != "" {
			na.Action += fmt.Sprintf(messageApprovalNamespace, ns, claimed.Owner.Namespace, claimed.NamespaceUID)
		}
		// The deadline is the sweeper's, kept on the record where only the
		// operator and admins write; the claimant's own annotations are
		// never read for it.
		if claimed != nil && claimed.Note.Class == sweep.ClassNeedsApproval && !claimed.Note.Until.IsZero() {
			na.Action += fmt.Sprintf(messageApprovalDeadline, claimed.Note.Until.UTC().Format(time.RFC3339))
		} else {
			na.Action += fmt.Sprintf(messageApprovalGrace, sweep.DefaultClaimGrace)
		}
	case errors.Is(err, ledger.ErrOtherConnection):
		kind, name := "a connection", ""
		if claimed != nil && claimed.Via != nil {
			kind, name = claimed.Via.Kind, claimed.Via.Name
		}
		na.Action = fmt.Sprintf(messageAdoptionConnection, from, kind, name)
	case errors.Is(err, ledger.ErrNotAdoptable):
		na.Action = fmt.Sprintf(messageAdoptionRefused, from)
	case errors.Is(err, ledger.ErrNotProven):
		na.Action = fmt.Sprintf(messageAdoptionNotProven, from)
	case errors.Is(err, ledger.ErrInvalidRecord):
		na.Action = fmt.Sprintf(messageAdoptionInvalid, from)
	default:
		return nil
	}
	return na
}

// recordPlan is plan with the UID of obj's namespace, which the record
// keeps so that an adoption can tell a namespace that was deleted and
// created again from the one it was written in. live is for an adoption,
// where the UID is the claimant's and decides the claim; see namespaceUID.
func (r *Reconciler[O, K, C]) recordPlan(ctx context.Context, obj O, conn Connection[K], live bool) (ledger.Plan, error) {
	p := r.plan(obj, conn)
	uid, err := r.namespaceUID(ctx, obj, live)
	p.NamespaceUID = uid
	return p, err
}

// namespaceUID is the UID of obj's namespace. An adoption (live) reads it
// from the API server, once per object: an object lives in one namespace
// instance for its whole life, so the answer cannot change while it
// exists, and a cache lagging behind a namespace deleted and created again
// would give a claimant the UID of the namespace the claimed record was
// written in, passing a claim that needs an admin. A record's own UID
// comes from namespaceCache when there is one: a cache can only lag, so
// its answer is the namespace's UID now or, at worst, that of an earlier
// namespace of the name, which is gone; a record naming a gone namespace
// makes a later claim on it wait for an admin (fail closed, and the next
// verification writes the UID again), never pass. Not found there (a
// namespace the informer has not seen yet), it is read live. A reader not
// allowed to get namespaces gives "" (logged once): records then lack it,
// and every adoption across UIDs needs an admin's approval, which fails
// closed without blocking any create.
func (r *Reconciler[O, K, C]) namespaceUID(ctx context.Context, obj O, live bool) (types.UID, error) {
	if obj.GetNamespace() == "" {
		return "", nil
	}
	if v, ok := r.namespaces.Load(obj.GetUID()); ok {
		return v.(types.UID), nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(namespaceGVK)
	key := client.ObjectKey{Name: obj.GetNamespace()}
	if !live && r.namespaceCache != nil {
		if err := r.namespaceCache.Get(ctx, key, ns); err == nil && ns.GetUID() != "" {
			return ns.GetUID(), nil
		}
	}
	err := r.o.APIReader.Get(ctx, key, ns)
	switch {
	case apierrors.IsForbidden(err):
		r.noNamespaces.Do(func() {
			logf.FromContext(ctx).Info("cannot read namespaces: cleanup records will not name their namespace, so every adoption across UIDs needs an admin's approval; grant get on namespaces to fix", "error", err.Error())
		})
		return "", nil
	case apierrors.IsNotFound(err):
		return "", nil // cannot be while obj exists; unknown is safe (approval needed)
	case err != nil:
		return "", fmt.Errorf("lifecycle: read namespace %s: %w", obj.GetNamespace(), err)
	}
	r.namespaces.Store(obj.GetUID(), ns.GetUID())
	return ns.GetUID(), nil
}

// keep keeps obj's record, marked Retain, for a restored object to adopt
// (ledger.Keep): the sweeper never deletes through it.
func (r *Reconciler[O, K, C]) keep(ctx context.Context, obj O) error {
	if r.o.Ledger == nil {
		return nil
	}
	p, err := r.recordPlan(ctx, obj, Connection[K]{}, false)
	if err != nil {
		return err
	}
	_, err = r.o.Ledger.Keep(ctx, p)
	return err
}

// cleanupLegacy migrates obj's record of the previous layout through its
// own connection (ledger.Migrate: the object vouches for the owner, the
// deployment for what carries its tag) and then cleans up through it.
func (r *Reconciler[O, K, C]) cleanupLegacy(ctx context.Context, x remote[O, K, C], obj O, conn Connection[K]) (ledger.CleanupResult, error) {
	p, err := r.recordPlan(ctx, obj, conn, false)
	if err != nil {
		return ledger.CleanupResult{}, err
	}
	if _, err := r.o.Ledger.Migrate(ctx, p, x); err != nil {
		return ledger.CleanupResult{}, err
	}
	return r.o.Ledger.Cleanup(ctx, obj.GetUID(), x)
}
