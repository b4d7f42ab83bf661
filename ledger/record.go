package ledger

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// SchemaVersion is the record layout this package writes. A record with any
// other version is invalid to this code: reported, never acted on.
const SchemaVersion = 1

// TagPrefix starts every ownership tag.
const TagPrefix = "finale:"

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

// Identity is what a connection reports about the external deployment it
// reaches, read live. Deployment is a stable identifier the service keeps in
// its own data (never a URL or a user-chosen name). Token is the secret held by
// the deployment's sentinel: it proves the deployment, it is never stored in a
// record (only Commit(Identity) is), and it must never be logged.
type Identity struct {
	Deployment string
	Token      []byte
}

// String redacts the token so that an Identity can be logged.
func (id Identity) String() string { return "deployment " + id.Deployment + " (token redacted)" }

// GoString redacts the token from %#v too.
func (id Identity) GoString() string { return id.String() }

// Commit returns the commitment to id stored in records: a SHA-256 over the
// deployment and the token. Knowing it does not let anyone produce the token.
func Commit(id Identity) string {
	h := sha256.New()
	h.Write([]byte("finale-deployment-proof/v1\x00"))
	h.Write([]byte(id.Deployment))
	h.Write([]byte{0})
	h.Write(id.Token)
	return hex.EncodeToString(h.Sum(nil))
}

// Proves reports whether id is the deployment a record with this deployment
// and commitment was written in.
func Proves(id Identity, deployment, commitment string) bool {
	if id.Deployment != deployment || len(id.Token) == 0 {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(Commit(id)), []byte(commitment)) == 1
}

func (id Identity) validate() error {
	if id.Deployment == "" {
		return fmt.Errorf("%w: empty deployment", ErrInvalidIdentity)
	}
	if len(id.Token) < 16 {
		return fmt.Errorf("%w: deployment %s: proof token shorter than 16 bytes", ErrInvalidIdentity, id.Deployment)
	}
	return nil
}

// Record is one cleanup record: what exists, or may exist, outside the cluster
// on behalf of Owner. It holds no secret.
type Record struct {
	Schema int
	Owner  Owner
	// Deployment identifies the external deployment the resources live in.
	Deployment string
	// Proof is Commit of the deployment's identity at the first write.
	Proof string
	// Tag is Tag(Owner), put on every external resource.
	Tag string
	// ExternalIDs are the exact IDs the deployment returned; only ever grown.
	ExternalIDs []string
	CreatedAt   time.Time
	// LastCreateAttempt is when a create was last about to be called; the
	// sweeper's settle window counts from it.
	LastCreateAttempt time.Time

	// Version is the store's optimistic-concurrency token (the ConfigMap's
	// resourceVersion); empty for a record never stored.
	Version string
	// Source locates the stored record, for Events; set by the store.
	Source *corev1.ObjectReference
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
	if len(r.Proof) != sha256.Size*2 {
		errs = append(errs, errors.New("proof is not a SHA-256 commitment"))
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
