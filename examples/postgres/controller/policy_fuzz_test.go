package controller

import (
	"net/netip"
	"testing"
)

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
		if err != nil || p == nil || !p.Allows(host) {
			return
		}
		if _, err := netip.ParseAddr(host); err != nil && !validName(normalName(host)) {
			t.Fatalf("policy %q allows %q, which is neither an IP literal nor a DNS name", entry, host)
		}
	})
}
