package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Names and labels of record ConfigMaps.
const (
	// NamePrefix starts every record ConfigMap's name; the owner UID follows.
	NamePrefix = "finale-cleanup-"
	// LabelRecord marks record ConfigMaps (value LabelRecordValue, the
	// layout); List selects on it, whatever its value.
	LabelRecord      = "finale.dev/cleanup-record"
	LabelRecordValue = "v2"
	// LabelKind holds the owner's lower-case kind.
	LabelKind = "finale.dev/kind"
	// LabelDeployment holds DeploymentLabel(deployment).
	LabelDeployment = "finale.dev/deployment"
	// NamespaceEnv names the environment variable that gives the default
	// namespace (the operator's own, through the downward API).
	NamespaceEnv = "POD_NAMESPACE"
	// AnnotationApproval, set by an admin on a record ConfigMap, names the
	// UID of the one object allowed to adopt the record although its
	// namespace is not the one the record was written in (Ledger.Adopt):
	//
	//	kubectl -n <records namespace> annotate configmap finale-cleanup-<old uid> finale.dev/adoption-approved-for=<new uid>
	AnnotationApproval = "finale.dev/adoption-approved-for"
	// AnnotationSweepState, AnnotationSweepClass, AnnotationSweepSince and
	// AnnotationSweepUntil hold the sweeper's Note on a record it keeps
	// (Record.Note): the state, the error class, since when, and until
	// when it keeps it (RFC 3339; only for a claim that needs an admin's
	// approval).
	AnnotationSweepState = "finale.dev/sweep-state"
	AnnotationSweepClass = "finale.dev/sweep-class"
	AnnotationSweepSince = "finale.dev/sweep-since"
	AnnotationSweepUntil = "finale.dev/sweep-until"
)

// Data keys of a record ConfigMap. One key per field keeps records readable
// with kubectl for the admin who has to clean up by hand.
const (
	keySchema       = "schemaVersion"
	keyAPIVersion   = "ownerAPIVersion"
	keyKind         = "ownerKind"
	keyNamespace    = "ownerNamespace"
	keyName         = "ownerName"
	keyUID          = "ownerUID"
	keyDeployment   = "deployment"
	keySalt         = "deploymentSalt"
	keyNamespaceUID = "ownerNamespaceUID"
	keyLegacyProof  = "deploymentProof" // LegacySchemaVersion only
	keyPolicy       = "deletionPolicy"
	keyVia          = "connection"
	keyMAC          = "mac"
	keyTag          = "tag"
	keyExternalIDs  = "externalIDs"
	keyCreatedAt    = "createdAt"
	keyLastAttempt  = "lastCreateAttempt"
	timeLayout      = time.RFC3339Nano
	maxLabelValue   = 63
	deploymentLabel = "d-"
)

// DeploymentLabel is the label value for deployment: a hash, because
// deployment identifiers need not be valid label values.
func DeploymentLabel(deployment string) string {
	sum := sha256.Sum256([]byte(deployment))
	return deploymentLabel + hex.EncodeToString(sum[:])[:40]
}

// ConfigMapName is the name of the record ConfigMap for uid.
func ConfigMapName(uid types.UID) string { return NamePrefix + string(uid) }

// ConfigMapClient is what ConfigMapStore needs: reads for Get and List (use
// an uncached reader, such as the manager's APIReader, so that List can page
// and Get sees the latest version) and writes.
type ConfigMapClient interface {
	client.Reader
	client.Writer
}

// ReadWriter joins a reader and a writer into a ConfigMapClient, for example
// ReadWriter{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient()}: the
// manager's default client reads from the cache, which cannot page and would
// watch every ConfigMap in the cluster.
type ReadWriter struct {
	client.Reader
	client.Writer
}

// ConfigMapStore keeps one ConfigMap per record in one namespace.
type ConfigMapStore struct {
	c         ConfigMapClient
	namespace string
}

var _ Store = (*ConfigMapStore)(nil)

// NewConfigMapStore returns a store in namespace; "" means the value of
// $POD_NAMESPACE, and it is an error when that is empty too, because records
// must never land in an owner's namespace by accident.
func NewConfigMapStore(c ConfigMapClient, namespace string) (*ConfigMapStore, error) {
	if c == nil {
		return nil, errors.New("ledger: NewConfigMapStore: nil client")
	}
	if namespace == "" {
		namespace = os.Getenv(NamespaceEnv)
	}
	if namespace == "" {
		return nil, fmt.Errorf("ledger: no namespace for cleanup records: pass the operator's namespace or set $%s (downward API fieldRef metadata.namespace)", NamespaceEnv)
	}
	return &ConfigMapStore{c: c, namespace: namespace}, nil
}

// Namespace is where the records live.
func (s *ConfigMapStore) Namespace() string { return s.namespace }

// Get implements Store.
func (s *ConfigMapStore) Get(ctx context.Context, uid types.UID) (*Record, error) {
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: s.namespace, Name: ConfigMapName(uid)}
	if err := s.c.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w for uid %s: %w", ErrNotFound, uid, err)
		}
		return nil, fmt.Errorf("ledger: get record %s: %w", key, err)
	}
	r, err := decode(&cm)
	if errors.Is(err, ErrLegacyRecord) && r.Owner.UID == uid {
		return r, err // for Migrate
	}
	if err != nil {
		return nil, err
	}
	if r.Owner.UID != uid {
		return nil, fmt.Errorf("%w: %s/%s holds owner uid %q", ErrInvalidRecord, cm.Namespace, cm.Name, r.Owner.UID)
	}
	return r, nil
}

// Put implements Store.
func (s *ConfigMapStore) Put(ctx context.Context, r *Record) error {
	if err := r.Check(); err != nil {
		return fmt.Errorf("ledger: refusing to store: %w", err)
	}
	cm := s.encode(r)
	if r.Version == "" {
		if err := s.c.Create(ctx, cm); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%w: %s/%s exists: %w", ErrConflict, cm.Namespace, cm.Name, err)
			}
			return fmt.Errorf("ledger: create record %s/%s: %w", cm.Namespace, cm.Name, err)
		}
	} else {
		cm.ResourceVersion = r.Version
		if err := s.c.Update(ctx, cm); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: %s/%s: %w", ErrConflict, cm.Namespace, cm.Name, err)
			}
			return fmt.Errorf("ledger: update record %s/%s: %w", cm.Namespace, cm.Name, err)
		}
	}
	r.Version = cm.ResourceVersion
	r.Source = reference(cm)
	return nil
}

// Delete implements Store.
func (s *ConfigMapStore) Delete(ctx context.Context, r *Record) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: ConfigMapName(r.Owner.UID)}}
	opts := []client.DeleteOption{}
	if r.Version != "" {
		opts = append(opts, client.Preconditions{ResourceVersion: &r.Version})
	}
	if err := s.c.Delete(ctx, cm, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		if apierrors.IsConflict(err) {
			return fmt.Errorf("%w: %s/%s: %w", ErrConflict, cm.Namespace, cm.Name, err)
		}
		return fmt.Errorf("ledger: delete record %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}

// List implements Store. It selects on LabelRecord, so a ConfigMap that lost
// the label is not seen; one that carries it but does not decode is returned
// in Page.Invalid.
func (s *ConfigMapStore) List(ctx context.Context, limit int64, cont string) (Page, error) {
	var l corev1.ConfigMapList
	// Any value of the label: a record of an older layout must show up as
	// invalid, not vanish from every report.
	err := s.c.List(ctx, &l, client.InNamespace(s.namespace), client.HasLabels{LabelRecord},
		client.Limit(limit), client.Continue(cont))
	if err != nil {
		return Page{}, fmt.Errorf("ledger: list records in %s: %w", s.namespace, err)
	}
	p := Page{Continue: l.Continue, Records: make([]*Record, 0, len(l.Items))}
	for i := range l.Items {
		cm := &l.Items[i]
		r, err := decode(cm)
		if err == nil && ConfigMapName(r.Owner.UID) != cm.Name {
			err = fmt.Errorf("%w: %s/%s holds owner uid %q", ErrInvalidRecord, cm.Namespace, cm.Name, r.Owner.UID)
		}
		if err != nil {
			p.Invalid = append(p.Invalid, Invalid{Record: r, Err: err})
			continue
		}
		p.Records = append(p.Records, r)
	}
	return p, nil
}

func (s *ConfigMapStore) encode(r *Record) *corev1.ConfigMap {
	ids, _ := json.Marshal(r.ExternalIDs) // a []string always marshals
	if r.ExternalIDs == nil {
		ids = []byte("[]")
	}
	via := ""
	if r.Via != nil {
		b, _ := json.Marshal(r.Via) // a struct of strings always marshals
		via = string(b)
	}
	kind := strings.ToLower(r.Owner.Kind)
	if len(kind) > maxLabelValue {
		kind = kind[:maxLabelValue]
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.namespace,
			Name:      ConfigMapName(r.Owner.UID),
			Labels: map[string]string{
				LabelRecord:                    LabelRecordValue,
				LabelKind:                      kind,
				LabelDeployment:                DeploymentLabel(r.Deployment),
				"app.kubernetes.io/managed-by": "finale",
			},
		},
		Data: map[string]string{
			keySchema:      strconv.Itoa(r.Schema),
			keyAPIVersion:  r.Owner.APIVersion,
			keyKind:        r.Owner.Kind,
			keyNamespace:   r.Owner.Namespace,
			keyName:        r.Owner.Name,
			keyUID:         string(r.Owner.UID),
			keyDeployment:  r.Deployment,
			keySalt:        r.Salt,
			keyPolicy:      string(r.Policy),
			keyVia:         via,
			keyMAC:         r.MAC,
			keyTag:         r.Tag,
			keyExternalIDs: string(ids),
			keyCreatedAt:   r.CreatedAt.UTC().Format(timeLayout),
			keyLastAttempt: r.LastCreateAttempt.UTC().Format(timeLayout),
		},
	}
	// A key added after records v2 shipped is written only when set, so a
	// record without it reads back exactly as it was written.
	if r.NamespaceUID != "" {
		cm.Data[keyNamespaceUID] = string(r.NamespaceUID)
	}
	return cm
}

// decode returns what it could read even on error, so that a report about an
// invalid record can still name its owner.
func decode(cm *corev1.ConfigMap) (*Record, error) {
	d := cm.Data
	if d[keySchema] == strconv.Itoa(LegacySchemaVersion) {
		return decodeLegacy(cm)
	}
	r := &Record{
		Owner: Owner{
			APIVersion: d[keyAPIVersion], Kind: d[keyKind], Namespace: d[keyNamespace],
			Name: d[keyName], UID: types.UID(d[keyUID]),
		},
		Deployment:   d[keyDeployment],
		Salt:         d[keySalt],
		Policy:       Policy(d[keyPolicy]),
		MAC:          d[keyMAC],
		Tag:          d[keyTag],
		NamespaceUID: types.UID(d[keyNamespaceUID]),
		Approval:     types.UID(cm.Annotations[AnnotationApproval]),
		Note:         noteOf(cm),
		Version:      cm.ResourceVersion,
		Source:       reference(cm),
	}
	var errs []error
	var err error
	if r.Schema, err = strconv.Atoi(d[keySchema]); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", keySchema, err))
	}
	if err := json.Unmarshal([]byte(d[keyExternalIDs]), &r.ExternalIDs); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", keyExternalIDs, err))
	}
	if v := d[keyVia]; v != "" {
		r.Via = &ConnectionRef{}
		if err := json.Unmarshal([]byte(v), r.Via); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", keyVia, err))
		}
	}
	if r.CreatedAt, err = time.Parse(timeLayout, d[keyCreatedAt]); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", keyCreatedAt, err))
	}
	if r.LastCreateAttempt, err = time.Parse(timeLayout, d[keyLastAttempt]); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", keyLastAttempt, err))
	}
	if len(errs) > 0 {
		return r, fmt.Errorf("%w: %s/%s does not decode: %w", ErrInvalidRecord, cm.Namespace, cm.Name, errors.Join(errs...))
	}
	if err := r.Check(); err != nil {
		return r, fmt.Errorf("%s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return r, nil
}

// noteOf reads the sweeper's Note from cm's annotations; a time that does
// not parse is left zero (a report, not a field the record depends on).
func noteOf(cm *corev1.ConfigMap) Note {
	n := Note{State: cm.Annotations[AnnotationSweepState], Class: cm.Annotations[AnnotationSweepClass]}
	if t, err := time.Parse(timeLayout, cm.Annotations[AnnotationSweepSince]); err == nil {
		n.Since = t
	}
	if t, err := time.Parse(timeLayout, cm.Annotations[AnnotationSweepUntil]); err == nil {
		n.Until = t
	}
	return n
}

// Note implements Noter: it puts n on the stored record as annotations,
// only if the record is still at r.Version (else ErrConflict), and sets
// r.Version and r.Note. The zero Note removes them. A merge patch: the
// record's data and its other annotations are left as they are.
func (s *ConfigMapStore) Note(ctx context.Context, r *Record, n Note) error {
	ann := map[string]any{AnnotationSweepState: nil, AnnotationSweepClass: nil, AnnotationSweepSince: nil, AnnotationSweepUntil: nil}
	if n.State != "" {
		ann[AnnotationSweepState] = n.State
		ann[AnnotationSweepSince] = n.Since.UTC().Format(timeLayout)
		if n.Class != "" {
			ann[AnnotationSweepClass] = n.Class
		}
		if !n.Until.IsZero() {
			ann[AnnotationSweepUntil] = n.Until.UTC().Format(timeLayout)
		}
	}
	name := s.recordName(r)
	cm, err := s.annotate(ctx, r, ann)
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: %s/%s: %w", ErrConflict, s.namespace, name, err)
		}
		return fmt.Errorf("ledger: note on record %s/%s: %w", s.namespace, name, err)
	}
	r.Version = cm.ResourceVersion
	r.Note = noteOf(cm)
	return nil
}

// recordName is the name of r's ConfigMap: where it was read from, else
// the name its owner's UID gives.
func (s *ConfigMapStore) recordName(r *Record) string {
	if r.Source != nil && r.Source.Name != "" {
		return r.Source.Name
	}
	return ConfigMapName(r.Owner.UID)
}

// annotate merges ann into the annotations of r's ConfigMap (a nil value
// removes one), only if the record is still at r.Version when that is
// set; the record's data and its other annotations are left as they are.
func (s *ConfigMapStore) annotate(ctx context.Context, r *Record, ann map[string]any) (*corev1.ConfigMap, error) {
	meta := map[string]any{"annotations": ann}
	if r.Version != "" {
		meta["resourceVersion"] = r.Version
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: s.recordName(r)}}
	return cm, s.c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch))
}

// decodeLegacy reads a record of LegacySchemaVersion as the previous
// release wrote it: owner, deployment, a commitment to the deployment's
// token, tag, IDs and times, unsigned. It returns the record with
// ErrLegacyRecord when it is consistent, so that its live owner's
// reconcile can migrate it, and a plain ErrInvalidRecord when it is not.
func decodeLegacy(cm *corev1.ConfigMap) (*Record, error) {
	d := cm.Data
	r := &Record{
		Schema: LegacySchemaVersion,
		Owner: Owner{
			APIVersion: d[keyAPIVersion], Kind: d[keyKind], Namespace: d[keyNamespace],
			Name: d[keyName], UID: types.UID(d[keyUID]),
		},
		Deployment: d[keyDeployment],
		Tag:        d[keyTag],
		Approval:   types.UID(cm.Annotations[AnnotationApproval]),
		Version:    cm.ResourceVersion,
		Source:     reference(cm),
	}
	var errs []error
	var err error
	if err := json.Unmarshal([]byte(d[keyExternalIDs]), &r.ExternalIDs); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", keyExternalIDs, err))
	}
	if r.CreatedAt, err = time.Parse(timeLayout, d[keyCreatedAt]); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", keyCreatedAt, err))
	}
	if r.LastCreateAttempt, err = time.Parse(timeLayout, d[keyLastAttempt]); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", keyLastAttempt, err))
	}
	if err := r.Owner.validate(); err != nil {
		errs = append(errs, err)
	}
	if r.Deployment == "" {
		errs = append(errs, errors.New("no deployment"))
	}
	if d[keyLegacyProof] == "" {
		errs = append(errs, errors.New("no deployment proof"))
	}
	if want := Tag(r.Owner); r.Tag != want {
		errs = append(errs, fmt.Errorf("tag %q does not match owner (want %q)", r.Tag, want))
	}
	if len(errs) > 0 {
		return r, fmt.Errorf("%w: %s/%s, a record of schema %d, does not decode: %w", ErrInvalidRecord, cm.Namespace, cm.Name, LegacySchemaVersion, errors.Join(errs...))
	}
	return r, fmt.Errorf("%w: %s/%s, owner %s: its owner's reconcile migrates it while the owner exists; one whose owner is gone is never acted on", ErrLegacyRecord, cm.Namespace, cm.Name, r.Owner)
}

func reference(cm *corev1.ConfigMap) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: "v1", Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name,
		UID: cm.UID, ResourceVersion: cm.ResourceVersion,
	}
}
