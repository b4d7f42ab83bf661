package controller

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/finale-dev/finale/ledger"
)

// crdName is what the Role and Database CRDs accept as a name (their CEL
// rule and maxLength 63).
var crdName = regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`)

// parseID reads IDs back from cleanup records, which anyone who could
// write the records namespace could have edited: whatever it accepts must
// be exactly "<name>@<tag>" with a name and a finale tag, so that the
// sweeper drops no other name than the one recorded.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{
		"app@finale:role:0b5ec1b2-7a61-4f4e-9d7e-3a4d2f1b9c11", "orders@finale:database:u",
		"", "@finale:role:u", "app", "app@", "app@other:role:u", "app@finale:", "a@b@finale:role:u",
		"app@finale:role:u@x", "app@finale:role:u\x00", "Robert'); DROP ROLE x;--@finale:role:u",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		name, tag, err := parseID(id)
		if err != nil {
			if name != "" || tag != "" {
				t.Fatalf("parseID(%q) failed (%v) but returned %q, %q", id, err, name, tag)
			}
			return
		}
		if name == "" || strings.Contains(name, "@") || !strings.HasPrefix(tag, ledger.TagPrefix) {
			t.Fatalf("parseID(%q) = %q, %q: not a name and a finale tag", id, name, tag)
		}
		if got := externalID(name, tag); got != id {
			t.Fatalf("parseID(%q) = %q, %q, which make %q", id, name, tag, got)
		}
		if strings.HasPrefix(tag, roleTagPrefix) && strings.HasPrefix(tag, databaseTagPrefix) {
			t.Fatalf("tag %q is both a Role's and a Database's", tag)
		}
	})
}

// Every ID the operator records (a name the CRDs accept, a tag from any
// owner) parses back to that name and tag, and its tag names one kind.
func FuzzExternalIDRoundTrip(f *testing.F) {
	f.Add("app_reader", "Role", "0b5ec1b2-7a61-4f4e-9d7e-3a4d2f1b9c11")
	f.Add("orders", "Database", "u")
	f.Add("x$1", "Role", "@")
	f.Fuzz(func(t *testing.T, name, kind, uid string) {
		if len(name) > 63 || !crdName.MatchString(name) {
			return
		}
		tag := ledger.Tag(ledger.Owner{Kind: kind, UID: types.UID(uid)})
		gotName, gotTag, err := parseID(externalID(name, tag))
		if err != nil || gotName != name || gotTag != tag {
			t.Fatalf("parseID(externalID(%q, %q)) = %q, %q, %v", name, tag, gotName, gotTag, err)
		}
		if strings.HasPrefix(tag, roleTagPrefix) && strings.HasPrefix(tag, databaseTagPrefix) {
			t.Fatalf("tag %q is both a Role's and a Database's", tag)
		}
	})
}

// The allow-list is read from the operator's flags and applied to hosts
// tenants write: no entry or host makes it panic, and whatever it allows
// is an IP literal or a DNS name (never a host list, a port, a path).
func FuzzServerPolicy(f *testing.F) {
	f.Add("db.example.com", "db.example.com")
	f.Add("*.pg.internal", "a.pg.internal")
	f.Add("10.0.0.0/8", "10.1.2.3")
	f.Add("*.", "x")
	f.Add("::1", "::ffff:127.0.0.1")
	f.Add("db.example.com", "db.example.com,evil")
	f.Fuzz(func(t *testing.T, entry, host string) {
		p, err := NewServerPolicy([]string{entry})
		if err != nil {
			return
		}
		if !p.Allows(host) || p == nil {
			return
		}
		if _, err := netip.ParseAddr(host); err != nil && !validName(normalName(host)) {
			t.Fatalf("policy %q allows %q, which is neither an IP literal nor a DNS name", entry, host)
		}
	})
}
