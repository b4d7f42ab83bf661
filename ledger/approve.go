package ledger

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApprovalOutcome is what ConfigMapStore.ApproveNamespace did with one
// record of the restored namespace.
type ApprovalOutcome string

// Outcomes of ConfigMapStore.ApproveNamespace, one per record of the
// namespace name and earlier namespace UID it was given.
const (
	// Approved: the claimant's UID was written on the record
	// (AnnotationApproval); with DryRun, it would have been.
	Approved ApprovalOutcome = "approved"
	// AlreadyApproved: the record already names the claimant.
	AlreadyApproved ApprovalOutcome = "already-approved"
	// NoClaimant: no object of the record's kind and name exists in the
	// namespace yet (restore it, then run the approval again).
	NoClaimant ApprovalOutcome = "no-claimant"
	// NotClaimed: an object of the record's kind and name exists but its
	// AnnotationUID does not name the record's owner: it is another
	// object, and nothing is approved for it.
	NotClaimed ApprovalOutcome = "not-claimed"
)

// Approval is what ConfigMapStore.ApproveNamespace did with one record.
type Approval struct {
	// Record is the record ConfigMap's name.
	Record string
	// Owner is the record's owner: the object that lived in the earlier
	// namespace.
	Owner Owner
	// Claimant is the UID of the object of the same kind, namespace and
	// name that claims the record; "" when there is none.
	Claimant types.UID
	Outcome  ApprovalOutcome
}

// ApproveRequest names a restored namespace: Namespace, whose records were
// written while it had the UID From, and which has been created again
// since (another UID). DryRun reports what would be approved and writes
// nothing.
type ApproveRequest struct {
	Namespace string
	From      types.UID
	DryRun    bool
}

// Errors of ApproveNamespace about the request itself.
var (
	// ErrNamespaceNotRestored: the namespace does not exist, or still has
	// the UID the records were written under (claims in it need no
	// approval).
	ErrNamespaceNotRestored = errors.New("ledger: the namespace is not a re-created one")
)

// ApproveNamespace is an admin's one action for a restored namespace: it
// approves, on each record written in req.Namespace while that namespace
// had the UID req.From, the one object that now has the record owner's
// kind, namespace and name and claims it (AnnotationUID naming the
// owner's UID), as `kubectl annotate ... AnnotationApproval=<uid>` does
// per record. Exact identity only: a record of another namespace, or of
// another earlier namespace UID, or one whose name no object claims, is
// left as it is. live reads the namespace and the claimants (an uncached
// reader); the store's client writes the approvals, each conditional on
// the record's resourceVersion as listed.
//
// Objects restored after it ran are not approved: run it again for them
// (it is idempotent). The records are not authenticated here (an admin's
// command need not hold the operator key): an approval adds nothing to a
// record that is not the operator's, because Adopt authenticates the
// record before it reads the approval. Records that do not decode are
// skipped.
func (s *ConfigMapStore) ApproveNamespace(ctx context.Context, live client.Reader, req ApproveRequest) ([]Approval, error) {
	if req.Namespace == "" || req.From == "" {
		return nil, errors.New("ledger: ApproveNamespace: the namespace and its earlier UID are required")
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	switch err := live.Get(ctx, client.ObjectKey{Name: req.Namespace}, ns); {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: namespace %s does not exist: create it (restore it) first", ErrNamespaceNotRestored, req.Namespace)
	case err != nil:
		return nil, fmt.Errorf("ledger: read namespace %s: %w", req.Namespace, err)
	case ns.GetUID() == req.From:
		return nil, fmt.Errorf("%w: namespace %s still has uid %s: claims in it need no approval", ErrNamespaceNotRestored, req.Namespace, req.From)
	}
	var out []Approval
	var errs []error
	cont := ""
	for {
		page, err := s.List(ctx, listPageSize, cont)
		if err != nil {
			return out, err
		}
		for _, r := range page.Records {
			if r.Owner.Namespace != req.Namespace || r.NamespaceUID != req.From {
				continue
			}
			a, err := s.approve(ctx, live, r, req.DryRun)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, a)
		}
		if page.Continue == "" {
			break
		}
		cont = page.Continue
	}
	return out, errors.Join(errs...)
}

// listPageSize is the page ApproveNamespace lists records in.
const listPageSize = 500

// approve approves r for the object that claims it, if one does.
func (s *ConfigMapStore) approve(ctx context.Context, live client.Reader, r *Record, dryRun bool) (Approval, error) {
	a := Approval{Record: s.recordName(r), Owner: r.Owner}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(r.Owner.GroupVersionKind())
	switch err := live.Get(ctx, client.ObjectKey{Namespace: r.Owner.Namespace, Name: r.Owner.Name}, obj); {
	case apierrors.IsNotFound(err):
		a.Outcome = NoClaimant
		return a, nil
	case err != nil:
		return a, fmt.Errorf("ledger: look up the claimant of %s: %w", r.Owner, err)
	}
	if !r.Owner.ClaimedBy(obj) {
		a.Outcome = NotClaimed
		return a, nil
	}
	a.Claimant = obj.GetUID()
	if r.Approval == a.Claimant {
		a.Outcome = AlreadyApproved
		return a, nil
	}
	a.Outcome = Approved
	if dryRun {
		return a, nil
	}
	if _, err := s.annotate(ctx, r, map[string]any{AnnotationApproval: string(a.Claimant)}); err != nil {
		return a, fmt.Errorf("ledger: approve %s for %s: %w", a.Record, a.Claimant, err)
	}
	return a, nil
}
