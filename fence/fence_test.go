package fence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
)

const me = "me"

// fakeLock is the wrapped lock: each write takes latency on the fake clock
// (the request's round trip) and returns err.
type fakeLock struct {
	clock   *clocktesting.FakeClock
	latency time.Duration
	err     error
	// get is what Get returns.
	get    *resourcelock.LeaderElectionRecord
	getErr error
}

func (f *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return f.get, nil, f.getErr
}
func (f *fakeLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return f.Update(ctx, ler)
}
func (f *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	f.clock.Step(f.latency)
	return f.err
}
func (f *fakeLock) RecordEvent(string) {}
func (f *fakeLock) Identity() string   { return me }
func (f *fakeLock) Describe() string   { return "ns/lease" }

// record is what the elector writes: renewed is its RenewTime, as an
// offset from t0 (the elector reads the wall clock; the Lease keeps it to
// the second, as the other replicas compare it).
func record(holder string, seconds int, renewed ...time.Duration) resourcelock.LeaderElectionRecord {
	r := resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: seconds}
	if len(renewed) > 0 {
		r.RenewTime = metav1.NewTime(t0.Add(renewed[0]))
	}
	return r
}

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one thing the elector does to the lock, then Until, as an offset
// from t0 (or "none").
type step struct {
	op      string // create, update, get
	rec     resourcelock.LeaderElectionRecord
	latency time.Duration
	err     error
	advance time.Duration // on the clock before the op
}

func TestUntil(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "lease")
	other := record("other", 15)
	cases := map[string]struct {
		margin time.Duration
		steps  []step
		want   []string // Until after each step, as an offset from t0, or "none"
	}{
		"nothing acquired": {
			steps: []step{{op: "get", rec: other}},
			want:  []string{"none"},
		},
		"acquire counts from the send, not the reply": {
			steps: []step{{op: "create", rec: record(me, 15), latency: 4 * time.Second}},
			want:  []string{"12s"}, // 0 + 15 - 3 (a fifth), though the reply came at 4s
		},
		"each renewal the others can tell apart extends from its own send": {
			steps: []step{
				{op: "update", rec: record(me, 15, 0)},
				{op: "update", rec: record(me, 15, 2*time.Second), advance: 2 * time.Second},
				{op: "update", rec: record(me, 15, 4*time.Second), advance: 2 * time.Second, latency: time.Second},
			},
			want: []string{"12s", "14s", "16s"},
		},
		"renewals within one second count from the first": {
			steps: []step{
				{op: "update", rec: record(me, 15, 100*time.Millisecond), advance: 100 * time.Millisecond},
				{op: "update", rec: record(me, 15, 400*time.Millisecond), advance: 300 * time.Millisecond},
				{op: "update", rec: record(me, 15, 900*time.Millisecond), advance: 500 * time.Millisecond},
				{op: "update", rec: record(me, 15, 1100*time.Millisecond), advance: 200 * time.Millisecond},
			},
			want: []string{"12.1s", "12.1s", "12.1s", "13.1s"},
		},
		"a failed renewal leaves the fence as it was": {
			steps: []step{
				{op: "update", rec: record(me, 15, 0)},
				{op: "update", rec: record(me, 15, 2*time.Second), advance: 2 * time.Second, err: errors.New("timeout")},
			},
			want: []string{"12s", "12s"},
		},
		"a failed attempt may have landed: its record counts from it": {
			steps: []step{
				{op: "update", rec: record(me, 15, 0)},
				{op: "update", rec: record(me, 15, 2*time.Second), advance: 2 * time.Second, err: errors.New("timeout")},
				{op: "update", rec: record(me, 15, 2500*time.Millisecond), advance: 500 * time.Millisecond},
			},
			want: []string{"12s", "12s", "14s"},
		},
		"a release drops the fence before it is sent, even if it fails": {
			steps: []step{
				{op: "update", rec: record(me, 15)},
				{op: "update", rec: record("", 1), err: errors.New("conflict")},
			},
			want: []string{"12s", "none"},
		},
		"reading another holder drops the fence": {
			steps: []step{
				{op: "update", rec: record(me, 15)},
				{op: "get", rec: other, advance: time.Second},
			},
			want: []string{"12s", "none"},
		},
		"reading our own record keeps it": {
			steps: []step{
				{op: "update", rec: record(me, 15)},
				{op: "get", rec: record(me, 15), advance: time.Second},
			},
			want: []string{"12s", "12s"},
		},
		"a deleted lease drops the fence": {
			steps: []step{
				{op: "update", rec: record(me, 15)},
				{op: "get", err: notFound},
			},
			want: []string{"12s", "none"},
		},
		"another read error keeps it": {
			steps: []step{
				{op: "update", rec: record(me, 15)},
				{op: "get", err: errors.New("connection refused")},
			},
			want: []string{"12s", "12s"},
		},
		"the recorded duration counts, not the configured one": {
			steps: []step{{op: "update", rec: record(me, 10)}},
			want:  []string{"7s"},
		},
		"a record no longer than the margin gives no fence": {
			steps: []step{{op: "update", rec: record(me, 3)}},
			want:  []string{"none"},
		},
		"an explicit margin": {
			margin: 500 * time.Millisecond,
			steps:  []step{{op: "update", rec: record(me, 15)}},
			want:   []string{"14.5s"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			inner := &fakeLock{clock: clk}
			l, err := New(inner, Options{LeaseDuration: 15 * time.Second, Margin: tc.margin, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range tc.steps {
				clk.Step(s.advance)
				inner.latency, inner.err = s.latency, s.err
				switch s.op {
				case "create":
					_ = l.Create(t.Context(), s.rec) // the error is the step's own
				case "update":
					_ = l.Update(t.Context(), s.rec) // the error is the step's own
				case "get":
					rec := s.rec
					inner.get, inner.getErr = &rec, s.err
					_, _, _ = l.Get(t.Context()) // the error is the step's own
				}
				got = append(got, offset(l.Until()))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Until after each step (-want +got):\n%s", diff)
			}
		})
	}
}

func offset(u time.Time) string {
	if u.IsZero() {
		return "none"
	}
	return u.Sub(t0).String()
}

// A renewal sent before a drop (a concurrent read that saw another
// holder) does not revive the fence when it returns.
func TestDropDuringRenewalWins(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	var l *Lock
	inner := &dropping{fakeLock: fakeLock{clock: clk}, during: func() {
		_, _, _ = l.Get(context.Background()) // returns another holder: drops
	}}
	inner.get = &resourcelock.LeaderElectionRecord{HolderIdentity: "other"}
	l, err := New(inner, Options{LeaseDuration: 15 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Update(t.Context(), record(me, 15)); err != nil {
		t.Fatal(err)
	}
	if u := l.Until(); !u.IsZero() {
		t.Fatalf("Until = %v after a drop that happened while the renewal was in flight; want none", offset(u))
	}
}

type dropping struct {
	fakeLock
	during func()
}

func (d *dropping) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	d.during()
	return d.fakeLock.Update(ctx, ler)
}

func TestNewRejects(t *testing.T) {
	inner := &fakeLock{clock: clocktesting.NewFakeClock(t0)}
	cases := map[string]struct {
		inner resourcelock.Interface
		o     Options
	}{
		"no inner lock":           {o: Options{LeaseDuration: 15 * time.Second}},
		"no lease duration":       {inner: inner},
		"under a second":          {inner: inner, o: Options{LeaseDuration: 900 * time.Millisecond}},
		"negative margin":         {inner: inner, o: Options{LeaseDuration: 15 * time.Second, Margin: -time.Second}},
		"margin as long as lease": {inner: inner, o: Options{LeaseDuration: 15 * time.Second, Margin: 15 * time.Second}},
		// 1.5s is recorded as 1s; a margin of 1s leaves nothing.
		"margin as long as the recorded lease": {inner: inner, o: Options{LeaseDuration: 1500 * time.Millisecond, Margin: time.Second}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := New(tc.inner, tc.o); !errors.Is(err, ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
		})
	}
	if _, err := NewLease(nil, LeaseOptions{Namespace: "ns", Name: "n"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("NewLease without a config = %v, want ErrConfig", err)
	}
}
