package controller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
)

// A Transport failure is handed to every dial of the same connection for
// the connect timeout, then forgotten; a success or another kind of
// failure forgets it at once; other connections are not affected.
func TestRecentFailures(t *testing.T) {
	refused := errors.New("connection refused")
	a, b := Key{Host: "a", Port: 5432}, Key{Host: "b", Port: 5432}
	type step struct {
		advance time.Duration
		put     *Key // with remember
		forget  *Key // a put that is not remembered
		getA    bool // want a's failure
		getB    bool
	}
	cases := map[string][]step{
		"fresh, then expired": {{put: &a, getA: true}, {advance: 9 * time.Second, getA: true}, {advance: time.Second}},
		"success forgets":     {{put: &a, getA: true}, {forget: &a}},
		"per connection":      {{put: &a, getA: true}, {put: &b, getA: true, getB: true}, {advance: 10 * time.Second}},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
			f := &recentFailures{clock: clk, keep: 10 * time.Second, last: map[Key]recentFailure{}}
			for i, s := range steps {
				clk.SetTime(clk.Now().Add(s.advance))
				if s.put != nil {
					f.put(*s.put, refused, true)
				}
				if s.forget != nil {
					f.put(*s.forget, nil, false)
				}
				got := []bool{errors.Is(f.get(a), refused), errors.Is(f.get(b), refused)}
				if diff := cmp.Diff([]bool{s.getA, s.getB}, got); diff != "" {
					t.Errorf("step %d: remembered failures of a, b (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

// Which connections the sweeper may use: verify-full only (it checks the
// server's certificate and host name), and hosts and ports the admin vouches
// for; verify-ca (any certificate of the CA, for any host) and the modes
// that check nothing never. A trusted host is trusted on its listed port
// only: a splicing proxy on another port of it is not.
func TestAuthentication(t *testing.T) {
	trusted, err := NewTrustedEndpoints([]string{"127.0.0.1:5432", "[::1]:6432", "PG.Sidecar.Local.:5432"})
	if err != nil {
		t.Fatal(err)
	}
	key := func(host string, port int32, mode v1alpha1.SSLMode, ca string) Key {
		return Key{Namespace: "ns", Secret: "s", Host: host, Port: port, SSLMode: mode, CAKey: ca}
	}
	const vouched = ": the administrator vouches that every path to this host and port is authenticated (--sweep-trusted-hosts)"
	cases := map[string]struct {
		k       Key
		trusted *TrustedEndpoints
		want    string
	}{
		"disable":                       {key("db", 5432, v1alpha1.SSLModeDisable, ""), nil, ""},
		"allow":                         {key("db", 5432, v1alpha1.SSLModeAllow, ""), nil, ""},
		"prefer":                        {key("db", 5432, v1alpha1.SSLModePrefer, ""), nil, ""},
		"require":                       {key("db", 5432, v1alpha1.SSLModeRequire, "ca.crt"), nil, ""},
		"verify-ca with a CA":           {key("db", 5432, v1alpha1.SSLModeVerifyCA, "ca.crt"), nil, ""},
		"verify-full, system":           {key("db", 5432, v1alpha1.SSLModeVerifyFull, ""), nil, AuthVerifyFullSystem},
		"verify-full with a CA":         {key("db", 5432, v1alpha1.SSLModeVerifyFull, "ca.crt"), nil, `TLS verify-full: the server's certificate and host name verified against the CA in credential Secret ns/s key "ca.crt"`},
		"trusted host and port":         {key("127.0.0.1", 5432, v1alpha1.SSLModeDisable, ""), trusted, "127.0.0.1:5432" + vouched},
		"trusted host, another port":    {key("127.0.0.1", 15432, v1alpha1.SSLModeDisable, ""), trusted, ""},
		"trusted IPv6 and port":         {key("::1", 6432, v1alpha1.SSLModeDisable, ""), trusted, "[::1]:6432" + vouched},
		"trusted IPv6, another port":    {key("::1", 5432, v1alpha1.SSLModeDisable, ""), trusted, ""},
		"IPv4-mapped IPv6 of a trusted": {key("::ffff:127.0.0.1", 5432, v1alpha1.SSLModeDisable, ""), trusted, "[::ffff:127.0.0.1]:5432" + vouched},
		"trusted name, other case":      {key("pg.sidecar.local", 5432, v1alpha1.SSLModeRequire, ""), trusted, "pg.sidecar.local:5432" + vouched},
		"trusted name, another port":    {key("pg.sidecar.local", 5433, v1alpha1.SSLModeRequire, ""), trusted, ""},
		"name below a trusted name":     {key("x.pg.sidecar.local", 5432, v1alpha1.SSLModeDisable, ""), trusted, ""},
		"untrusted host":                {key("127.0.0.2", 5432, v1alpha1.SSLModeDisable, ""), trusted, ""},
		"trusted list, verify-ca":       {key("db", 5432, v1alpha1.SSLModeVerifyCA, "ca.crt"), trusted, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, authentication(c.k, c.trusted)); diff != "" {
				t.Errorf("authentication (-want +got):\n%s", diff)
			}
		})
	}
}

// A --sweep-trusted-hosts entry is host:port, and nothing else: a host
// alone (it would trust every port of it), a bare IPv6 address, a
// wildcard, a prefix, a socket path or a bad port is refused at start-up
// with a message naming the entry and how to write it.
func TestNewTrustedEndpoints(t *testing.T) {
	for name, c := range map[string]struct {
		entries []string
		want    string // the error's text; "" for none
		trusts  string // what String lists
	}{
		"none":            {nil, "", "none"},
		"blank entries":   {[]string{" ", ""}, "", "none"},
		"IPv4 and port":   {[]string{"127.0.0.1:5432"}, "", "127.0.0.1:5432"},
		"IPv6 and port":   {[]string{" [::1]:5432 "}, "", "[::1]:5432"},
		"name and port":   {[]string{"PG.sidecar.local.:6432", "pg.sidecar.local:6432"}, "", "pg.sidecar.local:6432"},
		"IPv4 alone":      {[]string{"127.0.0.1"}, fmt.Sprintf(msgTrustedNoPort, "127.0.0.1"), ""},
		"name alone":      {[]string{"db.internal"}, fmt.Sprintf(msgTrustedNoPort, "db.internal"), ""},
		"bare IPv6":       {[]string{"fd00::1:5432"}, fmt.Sprintf(msgTrustedNoPort, "fd00::1:5432"), ""},
		"bracketed alone": {[]string{"[::1]"}, fmt.Sprintf(msgTrustedNoPort, "[::1]"), ""},
		"CIDR":            {[]string{"10.0.0.0/8"}, fmt.Sprintf(msgTrustedNoPort, "10.0.0.0/8"), ""},
		"CIDR and port":   {[]string{"10.0.0.0/8:5432"}, fmt.Sprintf(msgTrustedBad, "10.0.0.0/8:5432", "a trusted host is one host, not a prefix or a wildcard"), ""},
		"wildcard":        {[]string{"*.sidecar.local:5432"}, fmt.Sprintf(msgTrustedBad, "*.sidecar.local:5432", "a trusted host is one host, not a prefix or a wildcard"), ""},
		"socket":          {[]string{"/run/postgresql/.s.PGSQL.5432"}, fmt.Sprintf(msgTrustedBad, "/run/postgresql/.s.PGSQL.5432", "a unix socket; Servers reach PostgreSQL over TCP only"), ""},
		"port zero":       {[]string{"127.0.0.1:0"}, fmt.Sprintf(msgTrustedBad, "127.0.0.1:0", "the port is not a number from 1 to 65535"), ""},
		"port too big":    {[]string{"127.0.0.1:65536"}, fmt.Sprintf(msgTrustedBad, "127.0.0.1:65536", "the port is not a number from 1 to 65535"), ""},
		"leading zeros":   {[]string{"010.0.0.1:5432"}, fmt.Sprintf(msgTrustedBad, "010.0.0.1:5432", "not an IP address (write IPv4 without leading zeros, IPv6 without a zone)"), ""},
		"zone":            {[]string{"[fe80::1%eth0]:5432"}, fmt.Sprintf(msgTrustedBad, "[fe80::1%eth0]:5432", "not an IP address (write IPv4 without leading zeros, IPv6 without a zone)"), ""},
		"bad name":        {[]string{"a_b:5432"}, fmt.Sprintf(msgTrustedBad, "a_b:5432", "not a DNS name or IP address"), ""},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := NewTrustedEndpoints(c.entries)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff(c.want, gotErr); diff != "" {
				t.Errorf("NewTrustedEndpoints(%q) error (-want +got):\n%s", c.entries, diff)
			}
			if err == nil {
				if diff := cmp.Diff(c.trusts, got.String()); diff != "" {
					t.Errorf("String (-want +got):\n%s", diff)
				}
			}
		})
	}
}
