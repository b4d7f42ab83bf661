package ledger_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/finale-dev/finale/ledger"
)

// ParseTag reads tags back from the external service (a comment anyone
// with rights there can set) and from records: whatever it accepts is
// exactly the tag of the owner it names, so a tag can never be read as
// another owner's.
func FuzzParseTag(f *testing.F) {
	for _, s := range []string{
		"finale:role:0b5ec1b2-7a61-4f4e-9d7e-3a4d2f1b9c11", "finale:database:u", "", "finale:", "finale:role:",
		"finale::u", "finale:Role:u", "finale:role:u:v", "finale:role:u v", "other:role:u", "finale:role:u\n", "finale:ro le:u",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		kind, uid, ok := ledger.ParseTag(tag)
		if !ok {
			if kind != "" || uid != "" {
				t.Fatalf("ParseTag(%q) refused but returned %q, %q", tag, kind, uid)
			}
			return
		}
		if kind == "" || uid == "" || kind != strings.ToLower(kind) {
			t.Fatalf("ParseTag(%q) = %q, %q", tag, kind, uid)
		}
		if got := ledger.Tag(ledger.Owner{Kind: kind, UID: uid}); got != tag {
			t.Fatalf("ParseTag(%q) = %q, %q, whose tag is %q", tag, kind, uid, got)
		}
	})
}

// Every tag Tag makes for a Kubernetes kind and UID parses back to that
// kind (lower-cased) and UID.
func FuzzTagRoundTrip(f *testing.F) {
	f.Add("Role", "0b5ec1b2-7a61-4f4e-9d7e-3a4d2f1b9c11")
	f.Add("Database", "u")
	f.Fuzz(func(t *testing.T, kind, uid string) {
		// What the API server allows: a kind is a Go-style identifier, a
		// UID has no separators or spaces.
		if kind == "" || uid == "" || strings.Trim(kind, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" ||
			strings.ContainsAny(uid, ": \t\n") {
			return
		}
		tag := ledger.Tag(ledger.Owner{Kind: kind, UID: types.UID(uid)})
		gotKind, gotUID, ok := ledger.ParseTag(tag)
		if !ok || gotKind != strings.ToLower(kind) || gotUID != types.UID(uid) {
			t.Fatalf("ParseTag(Tag(%q, %q) = %q) = %q, %q, %v", kind, uid, tag, gotKind, gotUID, ok)
		}
	})
}
