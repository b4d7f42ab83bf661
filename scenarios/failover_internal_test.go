package scenarios

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
)

// The tap, in front of a real PostgreSQL and a real pgx client, tells who
// sent what: the session by its application_name, extended-protocol and
// simple statements with their text, a cancel request by the backend it
// names, the Terminate at close.
func TestTapAttributes(t *testing.T) {
	pg := testenv.Postgres(t)
	tp, err := newTap(pg.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer tp.close()
	cfg, err := pgx.ParseConfig(pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, cfg.Port = "127.0.0.1", uint16(mustPort(t, tp.addr()))
	cfg.RuntimeParams["application_name"] = "replica-x"
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "SELECT $1::int", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "SELECT 2", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err = conn.Exec(ctx, "SELECT pg_sleep(30)")
	cancel()
	if err == nil {
		t.Fatal("pg_sleep(30) returned within 300ms")
	}
	_ = conn.Close(context.Background()) // pgx may have closed it after the cancel
	err = controlplane.WaitFor(t.Context(), 30*time.Second, "the cancel request", func(context.Context) (bool, error) {
		for _, e := range tp.snapshot() {
			if e.Kind == wireCancel {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ Replica, Kind, SQL string }
	got := map[seen]bool{}
	for _, e := range tp.snapshot() {
		if e.Kind != wireOther {
			got[seen{e.Replica, e.Kind, e.SQL}] = true
		}
	}
	for _, want := range []seen{
		{"replica-x", wireSession, ""},
		{"replica-x", wirePrepare, "SELECT $1::int"},
		{"replica-x", wireStatement, "SELECT $1::int"},
		{"replica-x", wireStatement, "SELECT 2"},
		{"replica-x", wireStatement, "SELECT pg_sleep(30)"},
		{"replica-x", wireCancel, ""},
	} {
		if !got[want] {
			t.Errorf("the tap did not see %+v; it saw %v", want, got)
		}
	}
}

func mustPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A replica's sessions, statements and prepares after the next holder's
// acquisition are zombie calls; before it, or housekeeping after it, or
// the calls of a holder that never lost the lease, are not; what the tap
// could not attribute counts against the run.
func TestZombieCalls(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	terms := []term{{Holder: "a", Acquired: at(0)}, {Holder: "b", Acquired: at(10)}}
	events := []wireEvent{
		{At: at(5), Replica: "a", Kind: wireStatement},
		{At: at(9), Replica: "a", Kind: wireSession},
		{At: at(11), Replica: "a", Kind: wireTerminate},
		{At: at(11), Replica: "a", Kind: wireCancel},
		{At: at(11), Replica: "b", Kind: wireStatement},
		{At: at(12), Replica: "a", Kind: wirePrepare},
		{At: at(13), Replica: "a", Kind: wireStatement},
		{At: at(14), Replica: "a", Kind: wireStatement},
		{At: at(14), Kind: wireCancel},
		{At: at(15), Kind: wireOpaque},
	}
	got := zombieCalls(terms, events)
	want := []Violation{
		{NoZombieCall, "1 connection(s) or message(s) of kind opaque the tap could not attribute to a replica"},
		{NoZombieCall, "a sent 1 prepare message(s) after its lease passed (the first 2s after)"},
		{NoZombieCall, "a sent 2 statement message(s) after its lease passed (the first 3s after)"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]time.Time{"a": at(10)}, lostAt(terms)); diff != "" {
		t.Errorf("lostAt (-want +got):\n%s", diff)
	}
}

func TestStartupParam(t *testing.T) {
	body := []byte("user\x00admin\x00application_name\x00r1\x00\x00")
	cases := map[string]struct {
		body []byte
		key  string
		want string
	}{
		"present":   {body, "application_name", "r1"},
		"first":     {body, "user", "admin"},
		"absent":    {body, "database", ""},
		"truncated": {[]byte("application_name\x00r1"), "application_name", ""},
		"empty":     {nil, "user", ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := startupParam(tc.body, tc.key); got != tc.want {
				t.Errorf("startupParam = %q, want %q", got, tc.want)
			}
		})
	}
}

// The replicas' timings pass the operator's own flag checks before any
// replica starts, so a bad pair fails at once with the flag named instead of
// in every replica's log.
func TestElectionCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    Election
		ok   bool
	}{
		{"fast", FastElection, true},
		{"operator", OperatorElection, true},
		{"renew not shorter than the lease", Election{LeaseDuration: 2 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: time.Second / 2}, false},
		{"retry too close to renew", Election{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 2 * time.Second}, false},
		{"no retry", Election{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.e.check()
			if (err == nil) != tc.ok {
				t.Fatalf("check(%s) = %v, want ok %v", tc.e, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "--leader-elect-") {
				t.Errorf("error does not name the flag: %v", err)
			}
		})
	}
}
