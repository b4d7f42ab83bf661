package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// fixtureKey is the key testdata/record-v2.json was signed with.
var fixtureKey = func() Key {
	k, err := NewKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		panic(err)
	}
	return k
}()

// fixture reads a record ConfigMap as a release wrote it: record-v1.json by
// the previous release's ConfigMapStore (schema 1, unsigned), record-v2.json
// by records v2 before the namespace UID was added.
func fixture(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	return &cm
}

// A record written before fields were added to the layout still decodes,
// authenticates, and is written back with exactly the keys it had.
func TestRecordOfTheLastReleaseStillAuthenticates(t *testing.T) {
	cm := fixture(t, "record-v2.json")
	r, err := decode(cm)
	if err != nil {
		t.Fatal(err)
	}
	if !(&Ledger{key: fixtureKey}).authentic(r) {
		t.Fatal("a record signed by the last release no longer authenticates: every record in a cluster would turn invalid on upgrade")
	}
	if r.NamespaceUID != "" {
		t.Errorf("namespace UID %q read from a record that has none", r.NamespaceUID)
	}
	if diff := cmp.Diff(cm.Data, (&ConfigMapStore{namespace: cm.Namespace}).encode(r).Data); diff != "" {
		t.Errorf("re-encoded record (-stored +written):\n%s", diff)
	}
}

// A record of the previous release is recognised as such (ErrLegacyRecord,
// an ErrInvalidRecord: nothing acts on it unmigrated), with what it says
// decoded; a damaged one is merely invalid.
func TestRecordOfThePreviousReleaseIsLegacy(t *testing.T) {
	r, err := decode(fixture(t, "record-v1.json"))
	if !errors.Is(err, ErrLegacyRecord) || !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("decode = %v, want ErrLegacyRecord wrapping ErrInvalidRecord", err)
	}
	want := Owner{APIVersion: "postgres.finale.dev/v1alpha1", Kind: "Role", Namespace: "team", Name: "app", UID: "0b5ec1b2-7a61-4f4e-9d7e-3a4d2f1b9c11"}
	if diff := cmp.Diff(want, r.Owner); diff != "" || r.Schema != LegacySchemaVersion || r.Deployment != "7441234567890123456" {
		t.Errorf("legacy record: schema %d, deployment %q, owner (-want +got):\n%s", r.Schema, r.Deployment, diff)
	}
	damaged := fixture(t, "record-v1.json")
	damaged.Data[keyTag] = "finale:role:someone-else"
	if _, err := decode(damaged); errors.Is(err, ErrLegacyRecord) || !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("damaged legacy record = %v, want a plain ErrInvalidRecord", err)
	}
}

// memService answers as a genuine deployment does, in memory: pure
// decision tests only (the real-stack ones are in examples/postgres).
type memService struct {
	deployment string
	salt, tok  string
	tagged     map[string][]string
	forge      bool // answer with a token it does not have
}

func (s *memService) Prove(_ context.Context, q Question) (Answer, error) {
	if s.salt == "" && q.Enroll != nil {
		s.salt, s.tok = q.Enroll.Salt, q.Enroll.Token
	}
	tok := s.tok
	if s.forge {
		tok = "forged"
	}
	ids := slices.Clone(s.tagged[q.Tag])
	return Answer{Deployment: s.deployment, Salt: s.salt, Tagged: ids, Response: Respond(tok, q, s.deployment, s.salt, ids)}, nil
}

func fakeStore(t *testing.T, objs ...client.Object) (*ConfigMapStore, client.Client) {
	t.Helper()
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	store, err := NewConfigMapStore(c, "finale-system")
	if err != nil {
		t.Fatal(err)
	}
	return store, c
}

// Migrate turns the previous release's record of a live owner into a
// signed one, on the word of the owner (the caller's object) and of the
// deployment (a fresh proof, and what it says carries the tag), never on
// the unsigned record's: a record that names another owner or another
// deployment stays as it was.
func TestMigrate(t *testing.T) {
	legacy := fixture(t, "record-v1.json")
	var owner Owner
	if r, _ := decode(legacy); r != nil {
		owner = r.Owner
	}
	tag := Tag(owner)
	via := &ConnectionRef{APIVersion: "postgres.finale.dev/v1alpha1", Kind: "Server", Namespace: "team", Name: "pg", UID: "u-pg"}
	for name, tc := range map[string]struct {
		svc     *memService
		plan    Plan
		wantErr error
	}{
		"the owner's deployment": {
			svc:  &memService{deployment: "7441234567890123456", tagged: map[string][]string{tag: {"app"}}},
			plan: Plan{Owner: owner, Via: via, NamespaceUID: "ns-uid"},
		},
		"another deployment": {
			svc:     &memService{deployment: "9999", tagged: map[string][]string{tag: {"app"}}},
			plan:    Plan{Owner: owner, Via: via},
			wantErr: ErrNotProven,
		},
		"an answer that does not verify": {
			svc:     &memService{deployment: "7441234567890123456", forge: true},
			plan:    Plan{Owner: owner, Via: via},
			wantErr: ErrNotProven,
		},
		"another owner": {
			svc:     &memService{deployment: "7441234567890123456"},
			plan:    Plan{Owner: Owner{APIVersion: owner.APIVersion, Kind: owner.Kind, Namespace: "team", Name: "other", UID: owner.UID}},
			wantErr: ErrInvalidRecord,
		},
	} {
		t.Run(name, func(t *testing.T) {
			store, c := fakeStore(t, legacy.DeepCopy())
			l, err := New(store, Options{Key: GenerateKey()})
			if err != nil {
				t.Fatal(err)
			}
			rec, err := l.Migrate(t.Context(), tc.plan, tc.svc)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Migrate = %v, want %v", err, tc.wantErr)
				}
				var cm corev1.ConfigMap
				if err := c.Get(t.Context(), client.ObjectKeyFromObject(legacy), &cm); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(legacy.Data, cm.Data); diff != "" {
					t.Errorf("a record that was not migrated changed (-was +now):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.Get(t.Context(), owner.UID)
			if err != nil {
				t.Fatalf("the migrated record does not read back authenticated: %v", err)
			}
			want := &Record{Schema: SchemaVersion, Owner: owner, Policy: PolicyDelete, Via: via, NamespaceUID: "ns-uid",
				Deployment: "7441234567890123456", Salt: tc.svc.salt, Tag: tag, ExternalIDs: []string{"app"}}
			ignore := cmp.FilterPath(func(p cmp.Path) bool {
				switch p.Last().String() {
				case ".CreatedAt", ".LastCreateAttempt", ".MAC", ".Version", ".Source":
					return true
				}
				return false
			}, cmp.Ignore())
			if diff := cmp.Diff(want, got, ignore); diff != "" {
				t.Errorf("migrated record (-want +got):\n%s", diff)
			}
			if rec.Version != got.Version {
				t.Errorf("Migrate returned version %s, the store holds %s", rec.Version, got.Version)
			}
			if again, err := l.Migrate(t.Context(), tc.plan, tc.svc); err != nil || again.Version != got.Version {
				t.Errorf("Migrate of a current record = %v, %v; want it as it is", again, err)
			}
		})
	}
}

// What binds a claim to a record beyond the names (Adopt): the connection
// it was created through, and the namespace it was written in, unless an
// admin approved this very object.
func TestAdoptable(t *testing.T) {
	owner := Owner{APIVersion: "postgres.finale.dev/v1alpha1", Kind: "Role", Namespace: "team", Name: "app", UID: "old"}
	via := &ConnectionRef{APIVersion: "postgres.finale.dev/v1alpha1", Kind: "Server", Namespace: "team", Name: "pg", UID: "pg-old"}
	restoredVia := &ConnectionRef{APIVersion: "postgres.finale.dev/v1alpha1", Kind: "Server", Namespace: "team", Name: "pg", UID: "pg-new"}
	otherVia := &ConnectionRef{APIVersion: "postgres.finale.dev/v1alpha1", Kind: "Server", Namespace: "team", Name: "other", UID: "pg-other"}
	claimer := owner
	claimer.UID = "new"
	for name, tc := range map[string]struct {
		old  Record
		plan Plan
		want error
	}{
		"same namespace, same connection (re-created)": {
			old:  Record{Owner: owner, Via: via, NamespaceUID: "ns-1"},
			plan: Plan{Owner: claimer, Via: restoredVia, NamespaceUID: "ns-1"},
		},
		"another connection": {
			old:  Record{Owner: owner, Via: via, NamespaceUID: "ns-1"},
			plan: Plan{Owner: claimer, Via: otherVia, NamespaceUID: "ns-1"},
			want: ErrOtherConnection,
		},
		"no connection": {
			old:  Record{Owner: owner, Via: via, NamespaceUID: "ns-1"},
			plan: Plan{Owner: claimer, NamespaceUID: "ns-1"},
			want: ErrOtherConnection,
		},
		"namespace re-created": {
			old:  Record{Owner: owner, Via: via, NamespaceUID: "ns-1"},
			plan: Plan{Owner: claimer, Via: restoredVia, NamespaceUID: "ns-2"},
			want: ErrNeedsApproval,
		},
		"namespace re-created, approved for this object": {
			old:  Record{Owner: owner, Via: via, NamespaceUID: "ns-1", Approval: "new"},
			plan: Plan{Owner: claimer, Via: restoredVia, NamespaceUID: "ns-2"},
		},
		"namespace re-created, approved for another object": {
			old:  Record{Owner: owner, Via: via, NamespaceUID: "ns-1", Approval: "someone"},
			plan: Plan{Owner: claimer, Via: restoredVia, NamespaceUID: "ns-2"},
			want: ErrNeedsApproval,
		},
		"approved, but another connection": {
			old:  Record{Owner: owner, Via: via, NamespaceUID: "ns-1", Approval: "new"},
			plan: Plan{Owner: claimer, Via: otherVia, NamespaceUID: "ns-2"},
			want: ErrOtherConnection,
		},
		"record without the namespace's UID": {
			old:  Record{Owner: owner, Via: via},
			plan: Plan{Owner: claimer, Via: restoredVia, NamespaceUID: "ns-1"},
			want: ErrNeedsApproval,
		},
		"claimer's namespace unknown": {
			old:  Record{Owner: owner, Via: via, NamespaceUID: "ns-1"},
			plan: Plan{Owner: claimer, Via: restoredVia},
			want: ErrNeedsApproval,
		},
		"cluster-scoped": {
			old:  Record{Owner: Owner{APIVersion: "v1", Kind: "Thing", Name: "a", UID: "old"}},
			plan: Plan{Owner: Owner{APIVersion: "v1", Kind: "Thing", Name: "a", UID: "new"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := adoptable(&tc.old, tc.plan)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("adoptable = %v, want %v", err, tc.want)
			}
			if err != nil && !errors.Is(err, ErrNotAdoptable) {
				t.Errorf("%v does not wrap ErrNotAdoptable", err)
			}
		})
	}
}

// Keep leaves a retained owner's record in place, marked Retain, so that a
// restored owner can adopt it; a record it cannot use stays as it is and
// does not hold the deletion.
func TestKeep(t *testing.T) {
	owner := Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team", Name: "app", UID: types.UID("0b5ec1b2-7a61-4f4e-9d7e-3a4d2f1b9c12")}
	store, c := fakeStore(t, fixture(t, "record-v1.json"))
	l, err := New(store, Options{Key: GenerateKey()})
	if err != nil {
		t.Fatal(err)
	}
	svc := &memService{deployment: "d"}
	if _, err := l.Create(t.Context(), Plan{Owner: owner}, svc, func(context.Context, string) ([]string, error) { return []string{"x"}, nil }); err != nil {
		t.Fatal(err)
	}
	rec, err := New(store, Options{Key: l.key}) // another process: nothing remembered
	if err != nil {
		t.Fatal(err)
	}
	kept, err := rec.Keep(t.Context(), Plan{Owner: owner, NamespaceUID: "ns-1"})
	if err != nil || kept == nil || kept.Policy != PolicyRetain || kept.NamespaceUID != "ns-1" {
		t.Fatalf("Keep = %+v, %v; want the record, Retain, with its namespace", kept, err)
	}
	if got, err := l.Get(t.Context(), owner.UID); err != nil || got.Policy != PolicyRetain {
		t.Errorf("stored after Keep: %+v, %v", got, err)
	}
	if got, err := l.Keep(t.Context(), Plan{Owner: Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team", Name: "none", UID: "none"}}); err != nil || got != nil {
		t.Errorf("Keep without a record = %v, %v; want nil, nil", got, err)
	}
	legacy := fixture(t, "record-v1.json")
	r, _ := decode(legacy)
	if got, err := l.Keep(t.Context(), Plan{Owner: r.Owner}); err != nil || got != nil {
		t.Errorf("Keep of a legacy record = %v, %v; want nil, nil", got, err)
	}
	var cm corev1.ConfigMap
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(legacy), &cm); err != nil || !cmp.Equal(cm.Data, legacy.Data) {
		t.Errorf("Keep changed or removed a legacy record: %v", err)
	}
}
