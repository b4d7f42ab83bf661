package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// SchemaVersion is the record layout this package writes. A record with any
// other version is invalid to this code: reported, never acted on, except
// a record of LegacySchemaVersion, which its live owner's reconcile
// migrates (Ledger.Migrate).
const SchemaVersion = 2

// LegacySchemaVersion is the layout of the previous release: unsigned, its
// deployment proven by a commitment to a token the operator read from the
// service. Its fields are never trusted for anything irreversible: a live
// owner's connection proves the deployment again and the deployment lists
// what carries the tag (Ledger.Migrate); a record whose owner is gone
// stays invalid, reported, for an admin.
const LegacySchemaVersion = 1

// TagPrefix starts every ownership tag.
const TagPrefix = "finale:"

// AnnotationUID is the annotation on an owner that names the UID its
// external resources are recorded under. lifecycle sets it to the owner's
// own UID with its cleanup finalizer; an owner whose annotation names
// another UID (restored from a backup, which keeps annotations but not
// UIDs) claims that UID's record. The sweeper deletes nothing of a record
// an object of the same kind, namespace and name claims, and treats a
// namesake that does not claim it as what it is: another object.
const AnnotationUID = "finale.dev/uid"

// Owner is the Kubernetes object whose external resources a record covers.
type Owner struct {
	APIVersion string
	Kind       string
	// Namespace is empty for a cluster-scoped owner.
	Namespace string
	Name      string
	UID       types.UID
}

// GroupVersionKind is the owner's kind, for a metadata-only lookup.
func (o Owner) GroupVersionKind() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(o.APIVersion, o.Kind)
}

func (o Owner) String() string {
	if o.Namespace == "" {
		return fmt.Sprintf("%s %s (uid %s)", o.Kind, o.Name, o.UID)
	}
	return fmt.Sprintf("%s %s/%s (uid %s)", o.Kind, o.Namespace, o.Name, o.UID)
}

// ClaimedBy reports whether obj, found under o's kind, namespace and name,
// is another object (another UID) that claims o's resources: its
// AnnotationUID names o's UID, as a restored object's does.
func (o Owner) ClaimedBy(obj metav1.Object) bool {
	return obj.GetUID() != o.UID && obj.GetAnnotations()[AnnotationUID] == string(o.UID)
}

func (o Owner) validate() error {
	var missing []string
	if o.APIVersion == "" {
		missing = append(missing, "APIVersion")
	}
	if o.Kind == "" {
		missing = append(missing, "Kind")
	}
	if o.Name == "" {
		missing = append(missing, "Name")
	}
	if o.UID == "" {
		missing = append(missing, "UID")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: owner %v lacks %s", ErrInvalidOwner, o, strings.Join(missing, ", "))
	}
	if _, err := schema.ParseGroupVersion(o.APIVersion); err != nil {
		return fmt.Errorf("%w: owner apiVersion %q: %w", ErrInvalidOwner, o.APIVersion, err)
	}
	return nil
}

// Tag is the ownership tag the external resources of owner carry:
// "finale:<lower-case kind>:<uid>". It is deterministic, so a resource created
// by an attempt whose answer was lost can be found again, and it contains the
// UID, so two objects with the same name never share a tag.
func Tag(owner Owner) string {
	return TagPrefix + strings.ToLower(owner.Kind) + ":" + string(owner.UID)
}

// Policy says what happens to an owner's external resources when the owner
// goes: the same values as a managed kind's Spec.DeletionPolicy.
type Policy string

// Policies.
const (
	// PolicyDelete: the resources are deleted, by the owner's finalizer or,
	// when the owner went without it, by the sweeper.
	PolicyDelete Policy = "Delete"
	// PolicyRetain: the resources stay. The sweeper never deletes them; it
	// forgets the record and reports that it did.
	PolicyRetain Policy = "Retain"
)

func (p Policy) valid() bool { return p == PolicyDelete || p == PolicyRetain }

// ConnectionRef names the connection object (a Server, say) through which
// an owner's resources were created. The sweeper uses only that object, if
// it still exists with this UID, or connections an admin designated: never
// just any connection that proves the deployment.
type ConnectionRef struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	UID        types.UID
}

func (c *ConnectionRef) String() string {
	if c == nil {
		return "none"
	}
	if c.Namespace == "" {
		return fmt.Sprintf("%s %s (uid %s)", c.Kind, c.Name, c.UID)
	}
	return fmt.Sprintf("%s %s/%s (uid %s)", c.Kind, c.Namespace, c.Name, c.UID)
}

// GroupVersionKind is the connection object's kind.
func (c *ConnectionRef) GroupVersionKind() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(c.APIVersion, c.Kind)
}

// Record is one cleanup record: what exists, or may exist, outside the cluster
// on behalf of Owner. It holds no secret. The ledger signs it (MAC) with the
// operator's key; a record whose MAC does not verify was not written by this
// operator and is never acted on.
type Record struct {
	Schema int
	Owner  Owner
	// Policy is the owner's deletion policy, kept up to date by the owner's
	// reconciler.
	Policy Policy
	// Via is the connection object the resources were created through; nil
	// for kinds without one.
	Via *ConnectionRef
	// Deployment identifies the external deployment the resources live in,
	// as the deployment itself reported it.
	Deployment string
	// Salt is the deployment's sentinel salt: with the operator's key it
	// gives the token only the genuine deployment holds.
	Salt string
	// NamespaceUID is the UID of the owner's namespace when the record was
	// written; empty for a cluster-scoped owner or when the operator could
	// not read it. A namespace deleted and created again under the same
	// name has another UID: adoption across it needs an admin's approval
	// (Ledger.Adopt), so whoever re-creates a namespace does not inherit
	// what its previous tenants left.
	NamespaceUID types.UID
	// Tag is Tag(Owner), put on every external resource.
	Tag string
	// ExternalIDs are the exact IDs the deployment returned; only ever grown.
	ExternalIDs []string
	CreatedAt   time.Time
	// LastCreateAttempt is when a create was last about to be called; the
	// sweeper's settle window counts from it.
	LastCreateAttempt time.Time
	// MAC authenticates every field above; set by the ledger.
	MAC string

	// Version is the store's optimistic-concurrency token (the ConfigMap's
	// resourceVersion); empty for a record never stored.
	Version string
	// Source locates the stored record, for Events; set by the store.
	Source *corev1.ObjectReference
	// Approval is the UID of an object an admin allowed to adopt this
	// record across a re-created namespace (AnnotationApproval on the
	// stored record). It is not signed: it is the word of whoever may
	// write the records namespace, which is only the operator and admins.
	Approval types.UID
	// Note is the sweeper's last verdict on the record, kept on the stored
	// record (AnnotationSweepState and friends) so that a restarted
	// sweeper does not report it again and `finale audit` reads it from
	// the record rather than from Events that expire. It is not signed: a
	// report, never a proof; nothing irreversible depends on it.
	Note Note
}

// Note is a sweeper's verdict on a record that it keeps: the state (a
// sweep.State, such as "unreachable"), the error class of the failure
// that kept it ("" when none), when the sweeper first found it so, and,
// for a claim that needs an admin's approval, until when it keeps the
// record for it (zero otherwise). The zero Note is "nothing reported".
type Note struct {
	State string
	Class string
	Since time.Time
	Until time.Time
}

// Same reports whether n says what m says: the state, the class and the
// deadline; when it was first found so aside.
func (n Note) Same(m Note) bool {
	return n.State == m.State && n.Class == m.Class && n.Until.Equal(m.Until)
}

// signed is what the MAC covers, in a fixed order and encoding.
func (r *Record) signed() string {
	ids := r.ExternalIDs
	if ids == nil {
		ids = []string{} // as a stored record decodes
	}
	// Fields added after records v2 shipped are omitted when empty, so a
	// record written before them still authenticates (testdata).
	b, _ := json.Marshal(struct {
		Schema                       int
		Owner                        Owner
		Policy                       Policy
		Via                          *ConnectionRef
		Deployment, Salt, Tag        string
		ExternalIDs                  []string
		CreatedAt, LastCreateAttempt string
		NamespaceUID                 types.UID `json:",omitempty"`
	}{r.Schema, r.Owner, r.Policy, r.Via, r.Deployment, r.Salt, r.Tag, ids,
		r.CreatedAt.UTC().Format(time.RFC3339Nano), r.LastCreateAttempt.UTC().Format(time.RFC3339Nano), r.NamespaceUID})
	return string(b)
}

// Check reports whether r is internally consistent: a record that is not is
// left alone by the sweeper.
func (r *Record) Check() error {
	var errs []error
	if r.Schema != SchemaVersion {
		errs = append(errs, fmt.Errorf("schema version %d, this code knows %d", r.Schema, SchemaVersion))
	}
	if err := r.Owner.validate(); err != nil {
		errs = append(errs, err)
	}
	if r.Deployment == "" {
		errs = append(errs, errors.New("no deployment"))
	}
	if r.Salt == "" {
		errs = append(errs, errors.New("no deployment salt"))
	}
	if !r.Policy.valid() {
		errs = append(errs, fmt.Errorf("deletion policy %q is neither %s nor %s", r.Policy, PolicyDelete, PolicyRetain))
	}
	if r.Via != nil && (r.Via.Kind == "" || r.Via.Name == "" || r.Via.UID == "") {
		errs = append(errs, errors.New("connection reference lacks kind, name or uid"))
	}
	if want := Tag(r.Owner); r.Tag != want {
		errs = append(errs, fmt.Errorf("tag %q does not match owner (want %q)", r.Tag, want))
	}
	if slices.Contains(r.ExternalIDs, "") {
		errs = append(errs, errors.New("empty external ID"))
	}
	if r.CreatedAt.IsZero() {
		errs = append(errs, errors.New("no created-at time"))
	}
	if r.LastCreateAttempt.Before(r.CreatedAt) {
		errs = append(errs, errors.New("last create attempt before created-at"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidRecord, errors.Join(errs...))
	}
	return nil
}

// SettleFrom is the time the sweeper's settle window counts from.
func (r *Record) SettleFrom() time.Time {
	if r.LastCreateAttempt.After(r.CreatedAt) {
		return r.LastCreateAttempt
	}
	return r.CreatedAt
}

// DeepCopy returns an independent copy.
func (r *Record) DeepCopy() *Record {
	c := *r
	c.ExternalIDs = slices.Clone(r.ExternalIDs)
	if r.Source != nil {
		s := *r.Source
		c.Source = &s
	}
	if r.Via != nil {
		v := *r.Via
		c.Via = &v
	}
	return &c
}

// merge adds ids not yet recorded and reports whether any was new.
func (r *Record) merge(ids []string) bool {
	changed := false
	for _, id := range ids {
		if !slices.Contains(r.ExternalIDs, id) {
			r.ExternalIDs = append(r.ExternalIDs, id)
			changed = true
		}
	}
	return changed
}

// ParseTag splits an ownership tag into the owner's lower-case kind and
// UID; ok is false for anything Tag cannot have produced.
func ParseTag(tag string) (kind string, uid types.UID, ok bool) {
	rest, found := strings.CutPrefix(tag, TagPrefix)
	if !found {
		return "", "", false
	}
	kind, u, found := strings.Cut(rest, ":")
	if !found || kind == "" || u == "" || kind != strings.ToLower(kind) || strings.ContainsAny(u, ": \t\n") || strings.ContainsAny(kind, " \t\n") {
		return "", "", false
	}
	return kind, types.UID(u), true
}
