package ledger

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"
)

// A stored record is outside input: anyone who can write the records
// namespace can put anything in a ConfigMap. Decoding any content must
// not panic, and a record that decodes and authenticates must be exactly
// the record the ledger signed: a field the MAC did not cover could be
// edited and still be believed.
func FuzzDecodeRecord(f *testing.F) {
	l := &Ledger{key: GenerateKey()}
	at := time.Date(2026, 12, 1, 10, 0, 0, 123, time.UTC)
	owner := Owner{APIVersion: "postgres.finale.dev/v1alpha1", Kind: "Role", Namespace: "team", Name: "app", UID: types.UID("0b5ec1b2-7a61-4f4e-9d7e-3a4d2f1b9c11")}
	orig := &Record{
		Schema: SchemaVersion, Owner: owner, Deployment: "d1", Salt: "s1", Policy: PolicyDelete,
		Via: &ConnectionRef{Kind: "Server", Namespace: "team", Name: "pg", UID: "u-pg"},
		Tag: Tag(owner), ExternalIDs: []string{"app"}, CreatedAt: at, LastCreateAttempt: at, NamespaceUID: "u-team",
	}
	l.sign(orig)
	s := &ConfigMapStore{namespace: "finale-system"}
	keys := []string{keySchema, keyAPIVersion, keyKind, keyNamespace, keyName, keyUID, keyDeployment, keySalt,
		keyPolicy, keyVia, keyMAC, keyTag, keyExternalIDs, keyCreatedAt, keyLastAttempt, keyNamespaceUID}
	for i, v := range []string{"3", "v1", "Database", "other", "x", "u2", "d2", "s2", "Retain",
		`{"kind":"Server","namespace":"evil","name":"pg","uid":"u-pg"}`, "00", "finale:role:u2", `["app","victim"]`,
		"2026-12-01T10:00:00.000000123+00:00", "not a time", "u-another-team"} {
		f.Add(i, v)
	}
	f.Add(len(keys), "") // no field changed: the record as signed
	f.Fuzz(func(t *testing.T, field int, value string) {
		cm := s.encode(orig)
		name := "no field"
		if field >= 0 && field < len(keys) {
			name = keys[field]
			cm.Data[name] = value
		}
		got, err := decode(cm)
		if got == nil {
			t.Fatalf("decode returned no record (err %v); a report about it could not name its owner", err)
		}
		if err != nil || !l.authentic(got) {
			return
		}
		ignore := cmpopts.IgnoreFields(Record{}, "Version", "Source", "Approval")
		if diff := cmp.Diff(orig, got, ignore, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
			t.Fatalf("%s=%q decodes to another record that still authenticates (-signed +decoded):\n%s", name, value, diff)
		}
	})
}
