package app

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/finale-dev/finale/lifecycle"
)

// Bad election timings and fence margins are flag errors, reported before
// the operator touches the cluster.
func TestMainRejectsElectionFlags(t *testing.T) {
	cases := map[string][]string{
		"lease not longer than renew":   {"--leader-elect-lease-duration=10s", "--leader-elect-renew-deadline=10s"},
		"renew within a jittered retry": {"--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"},
		"zero retry period":             {"--leader-elect-retry-period=0"},
		"margin as long as the lease":   {"--leader-elect-fence-margin=15s"},
		"negative margin":               {"--leader-elect-fence-margin=-1s"},
		"lease under a second":          {"--leader-elect-lease-duration=900ms", "--leader-elect-renew-deadline=500ms", "--leader-elect-retry-period=100ms"},
		"not a duration":                {"--leader-elect-lease-duration=soon"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			// A kubeconfig that does not exist: a flag error must come
			// before it is read.
			args := append([]string{"--leader-elect", "--records-namespace=ns", "--kubeconfig=/nonexistent/kubeconfig"}, args...)
			if err := Main(context.Background(), args, io.Discard); !errors.Is(err, ErrFlags) {
				t.Fatalf("Main = %v, want ErrFlags", err)
			}
		})
	}
}

func TestCheckElectionAcceptsDefaults(t *testing.T) {
	if err := checkElection(DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod); err != nil {
		t.Fatal(err)
	}
}

// --sweep-trusted-hosts is a repeatable comma-separated list of host:port
// pairs; a host without a port is a flag error naming it
// (it would trust every port of the host).
func TestSweepTrustedHostsFlag(t *testing.T) {
	fs, s := NewFlags()
	if err := fs.Parse([]string{"--sweep-trusted-hosts=127.0.0.1:5432,[::1]:6432", "--sweep-trusted-hosts=db.internal:5432"}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(s.sweepTrusted, " "), "127.0.0.1:5432 [::1]:6432 db.internal:5432"; got != want {
		t.Errorf("sweep trusted hosts = %q, want %q", got, want)
	}
	fs, _ = NewFlags()
	fs.SetOutput(io.Discard)
	err := fs.Parse([]string{"--sweep-trusted-hosts=127.0.0.1"})
	if err == nil || !strings.Contains(err.Error(), `sweep trusted host "127.0.0.1" has no port: write host:port`) {
		t.Errorf("--sweep-trusted-hosts=127.0.0.1 = %v, want an error asking for the port", err)
	}
}

// Negative call and connect timeouts are flag errors too; zero keeps the
// operator's defaults.
func TestParseTimeouts(t *testing.T) {
	for name, args := range map[string][]string{
		"negative call timeout":    {"--call-timeout=-1s"},
		"negative connect timeout": {"--connect-timeout=-1s"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse(append([]string{"--records-namespace=ns"}, args...)); !errors.Is(err, ErrFlags) {
				t.Fatalf("Parse = %v, want ErrFlags", err)
			}
		})
	}
	s, err := Parse([]string{"--records-namespace=ns", "--call-timeout=2s", "--connect-timeout=1s"})
	if err != nil {
		t.Fatal(err)
	}
	if s.callTimeout != 2*time.Second || s.connectTimeout != time.Second {
		t.Errorf("timeouts = %s, %s; want 2s, 1s", s.callTimeout, s.connectTimeout)
	}
}

// --skip switches single guarantees off by name, for the benchmarks; a
// name it does not know is a flag error naming it and the two it knows.
func TestSkipFlag(t *testing.T) {
	cases := map[string]struct {
		args []string
		want lifecycle.Guarantee
		err  string
	}{
		"unset":          {want: 0},
		"records":        {args: []string{"--skip=records"}, want: lifecycle.SkipLedger},
		"hold":           {args: []string{"--skip=hold"}, want: lifecycle.SkipHold},
		"both, repeated": {args: []string{"--skip=records, hold", "--skip=hold"}, want: lifecycle.SkipLedger | lifecycle.SkipHold},
		"unknown":        {args: []string{"--skip=watchdog"}, err: `"watchdog" is not a guarantee --skip switches off: records or hold`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := Parse(append([]string{"--records-namespace=ns"}, tc.args...))
			if tc.err != "" {
				if !errors.Is(err, ErrFlags) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse = %v, want ErrFlags with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.skip != tc.want {
				t.Errorf("skip = %b, want %b", s.skip, tc.want)
			}
		})
	}
}

// --cache-kubeconfig that cannot be read fails the manager's options with
// the flag's name, before anything starts.
func TestCacheKubeconfigUnreadable(t *testing.T) {
	s, err := Parse([]string{"--records-namespace=ns", "--cache-kubeconfig=/nonexistent/kubeconfig"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.ManagerOptions(logr.Discard())
	if err == nil || !strings.Contains(err.Error(), "--cache-kubeconfig") {
		t.Fatalf("ManagerOptions = %v, want an error naming --cache-kubeconfig", err)
	}
}
