package controller

import (
	"errors"
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
// server's certificate and host name), and hosts the admin vouches for;
// verify-ca (any certificate of the CA, for any host) and the modes that
// check nothing never.
func TestAuthentication(t *testing.T) {
	trusted, err := parseHosts("sweep trusted host", []string{"127.0.0.1", "*.sidecar.local"})
	if err != nil {
		t.Fatal(err)
	}
	key := func(host string, mode v1alpha1.SSLMode, ca string) Key {
		return Key{Namespace: "ns", Secret: "s", Host: host, SSLMode: mode, CAKey: ca}
	}
	cases := map[string]struct {
		k       Key
		trusted *ServerPolicy
		want    string
	}{
		"disable":                 {key("db", v1alpha1.SSLModeDisable, ""), nil, ""},
		"allow":                   {key("db", v1alpha1.SSLModeAllow, ""), nil, ""},
		"prefer":                  {key("db", v1alpha1.SSLModePrefer, ""), nil, ""},
		"require":                 {key("db", v1alpha1.SSLModeRequire, "ca.crt"), nil, ""},
		"verify-ca with a CA":     {key("db", v1alpha1.SSLModeVerifyCA, "ca.crt"), nil, ""},
		"verify-full, system":     {key("db", v1alpha1.SSLModeVerifyFull, ""), nil, AuthVerifyFullSystem},
		"verify-full with a CA":   {key("db", v1alpha1.SSLModeVerifyFull, "ca.crt"), nil, `TLS verify-full: the server's certificate and host name verified against the CA in credential Secret ns/s key "ca.crt"`},
		"trusted host, disable":   {key("127.0.0.1", v1alpha1.SSLModeDisable, ""), trusted, "host 127.0.0.1: the administrator vouches that every path to it is authenticated (--sweep-trusted-hosts)"},
		"trusted wildcard":        {key("pg.sidecar.local", v1alpha1.SSLModeRequire, ""), trusted, "host pg.sidecar.local: the administrator vouches that every path to it is authenticated (--sweep-trusted-hosts)"},
		"untrusted host":          {key("127.0.0.2", v1alpha1.SSLModeDisable, ""), trusted, ""},
		"trusted list, verify-ca": {key("db", v1alpha1.SSLModeVerifyCA, "ca.crt"), trusted, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, authentication(c.k, c.trusted)); diff != "" {
				t.Errorf("authentication (-want +got):\n%s", diff)
			}
		})
	}
}
