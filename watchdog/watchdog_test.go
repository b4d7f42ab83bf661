package watchdog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) {
	// The watchdog logs bad input and failed condition writes; show them,
	// on stderr.
	log.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{}))
	testenv.Main(m)
}

// t0 is the deletionTimestamp of the objects in the pure tests.
var t0 = time.Date(2026, 5, 21, 11, 14, 55, 0, time.UTC)

const fin = "wd.test.finale.dev/cleanup"

// deleting is an object of a kind unique to the test (metrics are
// process-wide), deleted at t0.
func deleting(kind, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("wd.test.finale.dev/v1")
	u.SetKind(kind)
	u.SetNamespace("ns")
	u.SetName(name)
	u.SetUID(types.UID("uid-" + name))
	u.SetGeneration(3)
	dt := metav1.NewTime(t0)
	u.SetDeletionTimestamp(&dt)
	u.SetFinalizers([]string{fin})
	return u
}

// events records what a Recorder was asked to emit, one line per Event.
type events struct {
	mu  sync.Mutex
	got []string // guarded by mu
}

func (e *events) Eventf(regarding, _ runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	o := regarding.(client.Object)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, fmt.Sprintf("%s %s %s %s: %s", eventtype, reason, action, o.GetName(), fmt.Sprintf(note, args...)))
}

func (e *events) lines() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

// conditions records the conditions a ConditionWriter was asked to write.
type conditions struct {
	mu  sync.Mutex
	got []string // guarded by mu
}

func (c *conditions) WriteCondition(_ context.Context, obj client.Object, cond metav1.Condition) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, fmt.Sprintf("%s %s=%s %s gen=%d: %s", obj.GetName(), cond.Type, cond.Status, cond.Reason, cond.ObservedGeneration, cond.Message))
	return nil
}

func (c *conditions) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

var errTimeout = fmt.Errorf("describe deployment: %w", context.DeadlineExceeded)

// step is one thing that happens to a deletion: the clock moves by advance,
// then exactly one of attempt (with err), check, or done.
type step struct {
	advance time.Duration
	op      string // "attempt", "check", "done"
	err     error
	times   int // repeat the op this many times (default 1)
}

func TestTransitions(t *testing.T) {
	const threshold = 5 * time.Minute
	cases := map[string]struct {
		steps       []step
		wantBlocked []bool // Attempt results, in order
		wantEvents  []string
		wantConds   []string
		wantPending int
	}{
		"threshold crossing emits exactly one event across many retries": {
			steps: []step{
				{advance: time.Minute, op: "attempt", err: errTimeout, times: 3},
				{advance: 4*time.Minute + time.Second, op: "attempt", err: errTimeout, times: 50},
			},
			wantBlocked: append([]bool{false, false, false}, repeat(true, 50)...),
			wantEvents:  []string{"Warning CleanupBlocked Cleanup o: finalizer " + fin + " has held the deletion for 5m1s: 4 cleanup attempts, last error class Transport"},
			wantConds:   []string{"o CleanupBlocked=True CleanupBlocked gen=3: finalizer " + fin + " has held the deletion for 5m1s: 4 cleanup attempts, last error class Transport"},
			wantPending: 1,
		},
		"exactly at the threshold is not blocked": {
			steps:       []step{{advance: threshold, op: "attempt", err: errTimeout}},
			wantBlocked: []bool{false},
			wantPending: 1,
		},
		"age counts from deletionTimestamp, not from the first attempt": {
			steps:       []step{{advance: 10 * time.Minute, op: "attempt", err: errTimeout}},
			wantBlocked: []bool{true},
			wantEvents:  []string{"Warning CleanupBlocked Cleanup o: finalizer " + fin + " has held the deletion for 10m0s: 1 cleanup attempts, last error class Transport"},
			wantConds:   []string{"o CleanupBlocked=True CleanupBlocked gen=3: finalizer " + fin + " has held the deletion for 10m0s: 1 cleanup attempts, last error class Transport"},
			wantPending: 1,
		},
		"a success past the threshold is not blocked": {
			steps:       []step{{advance: time.Hour, op: "attempt"}},
			wantBlocked: []bool{false},
			wantPending: 1,
		},
		"success recovers once": {
			steps: []step{
				{advance: 6 * time.Minute, op: "attempt", err: errTimeout, times: 2},
				{advance: time.Minute, op: "attempt", times: 2},
			},
			wantBlocked: []bool{true, true, false, false},
			wantEvents: []string{
				"Warning CleanupBlocked Cleanup o: finalizer " + fin + " has held the deletion for 6m0s: 1 cleanup attempts, last error class Transport",
				"Normal CleanupRecovered Cleanup o: finalizer " + fin + " is no longer blocked after 7m0s and 3 cleanup attempts",
			},
			wantConds: []string{
				"o CleanupBlocked=True CleanupBlocked gen=3: finalizer " + fin + " has held the deletion for 6m0s: 1 cleanup attempts, last error class Transport",
				"o CleanupBlocked=False CleanupRecovered gen=3: finalizer " + fin + " is no longer blocked after 7m0s and 3 cleanup attempts",
			},
			wantPending: 1,
		},
		"Done recovers and forgets": {
			steps: []step{
				{advance: 6 * time.Minute, op: "attempt", err: errTimeout},
				{advance: time.Minute, op: "done"},
			},
			wantBlocked: []bool{true},
			wantEvents: []string{
				"Warning CleanupBlocked Cleanup o: finalizer " + fin + " has held the deletion for 6m0s: 1 cleanup attempts, last error class Transport",
				"Normal CleanupRecovered Cleanup o: finalizer " + fin + " is no longer blocked after 7m0s and 1 cleanup attempts",
			},
			wantConds: []string{
				"o CleanupBlocked=True CleanupBlocked gen=3: finalizer " + fin + " has held the deletion for 6m0s: 1 cleanup attempts, last error class Transport",
				"o CleanupBlocked=False CleanupRecovered gen=3: finalizer " + fin + " is no longer blocked after 7m0s and 1 cleanup attempts",
			},
		},
		"Done of a deletion never blocked announces nothing": {
			steps: []step{
				{advance: time.Minute, op: "attempt", err: errTimeout},
				{advance: time.Minute, op: "done"},
			},
			wantBlocked: []bool{false},
		},
		"failing again after recovery is a new transition": {
			steps: []step{
				{advance: 6 * time.Minute, op: "attempt", err: errTimeout},
				{op: "attempt"},
				{advance: time.Minute, op: "attempt", err: errTimeout, times: 2},
			},
			wantBlocked: []bool{true, false, true, true},
			wantEvents: []string{
				"Warning CleanupBlocked Cleanup o: finalizer " + fin + " has held the deletion for 6m0s: 1 cleanup attempts, last error class Transport",
				"Normal CleanupRecovered Cleanup o: finalizer " + fin + " is no longer blocked after 6m0s and 2 cleanup attempts",
				"Warning CleanupBlocked Cleanup o: finalizer " + fin + " has held the deletion for 7m0s: 3 cleanup attempts, last error class Transport",
			},
			wantConds: []string{
				"o CleanupBlocked=True CleanupBlocked gen=3: finalizer " + fin + " has held the deletion for 6m0s: 1 cleanup attempts, last error class Transport",
				"o CleanupBlocked=False CleanupRecovered gen=3: finalizer " + fin + " is no longer blocked after 6m0s and 2 cleanup attempts",
				"o CleanupBlocked=True CleanupBlocked gen=3: finalizer " + fin + " has held the deletion for 7m0s: 3 cleanup attempts, last error class Transport",
			},
			wantPending: 1,
		},
		"Check promotes a failing deletion nobody retries, once": {
			steps: []step{
				{advance: time.Minute, op: "attempt", err: errTimeout},
				{advance: 3 * time.Minute, op: "check"},
				{advance: 2 * time.Minute, op: "check", times: 3},
			},
			wantBlocked: []bool{false},
			wantEvents:  []string{"Warning CleanupBlocked Cleanup o: finalizer " + fin + " has held the deletion for 6m0s: 1 cleanup attempts, last error class Transport"},
			wantConds:   []string{"o CleanupBlocked=True CleanupBlocked gen=3: finalizer " + fin + " has held the deletion for 6m0s: 1 cleanup attempts, last error class Transport"},
			wantPending: 1,
		},
		"Check leaves a recent success alone, then blocks when Done never comes": {
			steps: []step{
				{advance: 10 * time.Minute, op: "attempt"},
				{advance: 5 * time.Minute, op: "check"},
				{advance: time.Second, op: "check"},
			},
			wantBlocked: []bool{false},
			wantEvents:  []string{"Warning CleanupBlocked Cleanup o: finalizer " + fin + " has held the deletion for 15m1s: 1 cleanup attempts, last error class none"},
			wantConds:   []string{"o CleanupBlocked=True CleanupBlocked gen=3: finalizer " + fin + " has held the deletion for 15m1s: 1 cleanup attempts, last error class none"},
			wantPending: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			ev, cs := &events{}, &conditions{}
			w := New(Options{Clock: clk, Threshold: threshold, Recorder: ev, Conditions: cs})
			obj := deleting("TransitionWidget", "o")
			var gotBlocked []bool
			for _, s := range tc.steps {
				clk.SetTime(clk.Now().Add(s.advance))
				n := max(s.times, 1)
				for range n {
					switch s.op {
					case "attempt":
						gotBlocked = append(gotBlocked, w.Attempt(t.Context(), obj, fin, s.err))
					case "check":
						w.Check(t.Context())
					case "done":
						w.Done(t.Context(), obj, fin)
					}
				}
			}
			if diff := cmp.Diff(tc.wantBlocked, gotBlocked); diff != "" {
				t.Errorf("Attempt results (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEvents, ev.lines()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantConds, cs.lines()); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if got := len(w.Pending()); got != tc.wantPending {
				t.Errorf("pending: got %d entries, want %d", got, tc.wantPending)
			}
		})
	}
}

func repeat(b bool, n int) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = b
	}
	return out
}

func TestAfterAttempt(t *testing.T) {
	const th = 5 * time.Minute
	cases := map[string]struct {
		s    state
		want bool
	}{
		"failure within threshold stays unblocked": {s: state{age: th, lastFailed: true}, want: false},
		"failure past threshold blocks":            {s: state{age: th + 1, lastFailed: true}, want: true},
		"failure keeps a block":                    {s: state{blocked: true, age: th + 1, lastFailed: true}, want: true},
		"success unblocks":                         {s: state{blocked: true, age: time.Hour}, want: false},
		"success past threshold does not block":    {s: state{age: time.Hour}, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, afterAttempt(tc.s, th)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestOnCheck(t *testing.T) {
	const th = 5 * time.Minute
	cases := map[string]struct {
		s    state
		want bool
	}{
		"young failure stays":                  {s: state{age: th, sinceLast: th, lastFailed: true}, want: false},
		"old failure blocks":                   {s: state{age: th + 1, lastFailed: true}, want: true},
		"blocked stays blocked":                {s: state{blocked: true, age: th + 1, lastFailed: true}, want: true},
		"blocked stays blocked after success":  {s: state{blocked: true, age: th + 1}, want: true},
		"recent success waits for Done":        {s: state{age: time.Hour, sinceLast: th}, want: false},
		"success with no Done for a threshold": {s: state{age: time.Hour, sinceLast: th + 1}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, onCheck(tc.s, th)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// authErr is classified Auth by a user-supplied rule, as a caller's SDK
// error would be.
type authErr struct{}

func (authErr) Error() string { return "permission denied" }

func TestAttemptsByClass(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0.Add(2 * time.Minute))
	cl := errclass.New(func(_ context.Context, err error) (errclass.Class, bool) {
		if errors.As(err, new(authErr)) {
			return errclass.Auth, true
		}
		return "", false
	})
	w := New(Options{Clock: clk, Classifier: cl})
	// Metrics are process-wide: compare increments (go test -count=N).
	authBefore := counter(t, cleanupAttempts, "ClassWidget", fin, "Auth")
	okBefore := counter(t, cleanupAttempts, "ClassWidget", fin, successLabel)
	old, young := deleting("ClassWidget", "old"), deleting("ClassWidget", "young")
	young.SetDeletionTimestamp(&metav1.Time{Time: t0.Add(time.Minute)})
	ctx := t.Context()
	for _, err := range []error{errTimeout, errTimeout, fmt.Errorf("wrapped: %w", authErr{}), nil, context.Canceled, authErr{}} {
		w.Attempt(ctx, old, fin, err)
	}
	w.Attempt(ctx, young, fin, errTimeout)
	clk.SetTime(clk.Now().Add(time.Minute))

	want := []Deletion{{
		Kind: "ClassWidget", Namespace: "ns", Name: "old", UID: "uid-old", Finalizer: fin,
		Since: t0, Age: 3 * time.Minute, Attempts: 6,
		AttemptsByClass: map[errclass.Class]int{errclass.Transport: 2, errclass.Auth: 2, errclass.Canceled: 1},
		LastClass:       errclass.Auth, LastError: "permission denied",
		LastAttempt: t0.Add(2 * time.Minute), LastFailed: true,
	}, {
		Kind: "ClassWidget", Namespace: "ns", Name: "young", UID: "uid-young", Finalizer: fin,
		Since: t0.Add(time.Minute), Age: 2 * time.Minute, Attempts: 1,
		AttemptsByClass: map[errclass.Class]int{errclass.Transport: 1},
		LastClass:       errclass.Transport, LastError: errTimeout.Error(),
		LastAttempt: t0.Add(2 * time.Minute), LastFailed: true,
	}}
	if diff := cmp.Diff(want, w.Pending()); diff != "" {
		t.Errorf("Pending (-want +got):\n%s", diff)
	}
	if got, want := counter(t, cleanupAttempts, "ClassWidget", fin, "Auth")-authBefore, 2.0; got != want {
		t.Errorf("attempts{class=Auth} = %v, want %v", got, want)
	}
	if got, want := counter(t, cleanupAttempts, "ClassWidget", fin, successLabel)-okBefore, 1.0; got != want {
		t.Errorf("attempts{class=Success} = %v, want %v", got, want)
	}
}

func TestBadInputIsNotTracked(t *testing.T) {
	notDeleting := deleting("BadWidget", "alive")
	notDeleting.SetDeletionTimestamp(nil)
	noUID := deleting("BadWidget", "nouid")
	noUID.SetUID("")
	cases := map[string]struct {
		obj       client.Object
		finalizer string
		wantLog   string
	}{
		"nil object":           {obj: nil, finalizer: fin, wantLog: "nil object"},
		"typed nil object":     {obj: (*unstructured.Unstructured)(nil), finalizer: fin, wantLog: "nil object"},
		"no deletionTimestamp": {obj: notDeleting, finalizer: fin, wantLog: "no deletionTimestamp"},
		"no UID":               {obj: noUID, finalizer: fin, wantLog: "no UID"},
		"empty finalizer":      {obj: deleting("BadWidget", "nofin"), finalizer: "", wantLog: "empty finalizer"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var logs strings.Builder
			ctx := log.IntoContext(t.Context(), funcr.New(func(prefix, args string) { logs.WriteString(args + "\n") }, funcr.Options{}))
			clk := clocktesting.NewFakePassiveClock(t0.Add(time.Hour))
			w := New(Options{Clock: clk})
			if w.Attempt(ctx, tc.obj, tc.finalizer, errTimeout) {
				t.Error("Attempt reported blocked for bad input")
			}
			if got := w.Pending(); len(got) != 0 {
				t.Errorf("bad input tracked: %+v", got)
			}
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("log %q does not say %q", logs.String(), tc.wantLog)
			}
		})
	}
}

// TestConcurrentAttemptsAnnounceOnce: many workers failing past the
// threshold while Check runs announce one transition, once (-race).
func TestConcurrentAttemptsAnnounceOnce(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0.Add(time.Hour))
	ev, cs := &events{}, &conditions{}
	w := New(Options{Clock: clk, Recorder: ev, Conditions: cs})
	obj := deleting("ConcurrentWidget", "c")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				w.Attempt(t.Context(), obj, fin, errTimeout)
				w.Check(t.Context())
			}
		}()
	}
	wg.Wait()
	if got := len(ev.lines()); got != 1 {
		t.Errorf("events: %d, want 1: %q", got, ev.lines())
	}
	if got := len(cs.lines()); got != 1 {
		t.Errorf("condition writes: %d, want 1", got)
	}
	if got := w.Pending(); len(got) != 1 || got[0].Attempts != 400 || got[0].AttemptsByClass[errclass.Transport] != 400 {
		t.Errorf("Pending: want one entry with 400 Transport attempts, got %+v", got)
	}
}

func TestConditionWriteFailureDoesNotBreakCaller(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0.Add(time.Hour))
	calls := 0
	failing := ConditionWriterFn(func(context.Context, client.Object, metav1.Condition) error {
		calls++
		return errors.New("apiserver says no")
	})
	gone := ConditionWriterFn(func(context.Context, client.Object, metav1.Condition) error {
		return fmt.Errorf("patch: %w", ErrObjectGone)
	})
	before := counter(t, conditionWriteFailures, "FailWidget")
	w := New(Options{Clock: clk, Conditions: failing})
	if !w.Attempt(t.Context(), deleting("FailWidget", "a"), fin, errTimeout) {
		t.Error("Attempt: not blocked after a failed condition write")
	}
	w2 := New(Options{Clock: clk, Conditions: gone})
	w2.Attempt(t.Context(), deleting("FailWidget", "b"), fin, errTimeout)
	if calls != 1 {
		t.Errorf("condition writes: %d, want 1", calls)
	}
	if got := counter(t, conditionWriteFailures, "FailWidget") - before; got != 1 {
		t.Errorf("condition write failures counted: %v, want 1 (a gone object is no failure)", got)
	}
}

func TestTwoFinalizersShareOneCondition(t *testing.T) {
	const other = "wd.test.finale.dev/other"
	clk := clocktesting.NewFakePassiveClock(t0.Add(time.Hour))
	cs := &conditions{}
	w := New(Options{Clock: clk, Conditions: cs})
	obj := deleting("PairWidget", "p")
	ctx := t.Context()
	w.Attempt(ctx, obj, fin, errTimeout)
	w.Attempt(ctx, obj, other, authErr{})
	w.Attempt(ctx, obj, fin, nil)
	w.Done(ctx, obj, other)
	want := []string{
		"p CleanupBlocked=True CleanupBlocked gen=3: finalizer " + fin + " has held the deletion for 1h0m0s: 1 cleanup attempts, last error class Transport",
		"p CleanupBlocked=True CleanupBlocked gen=3: finalizer " + fin + " has held the deletion for 1h0m0s: 1 cleanup attempts, last error class Transport; " +
			"finalizer " + other + " has held the deletion for 1h0m0s: 1 cleanup attempts, last error class Unknown",
		"p CleanupBlocked=True CleanupBlocked gen=3: finalizer " + other + " has held the deletion for 1h0m0s: 1 cleanup attempts, last error class Unknown",
		"p CleanupBlocked=False CleanupRecovered gen=3: finalizer " + other + " is no longer blocked after 1h0m0s and 1 cleanup attempts",
	}
	if diff := cmp.Diff(want, cs.lines()); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
}

func TestMetrics(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0.Add(time.Minute))
	w := New(Options{Clock: clk})
	countBefore, sumBefore := histogram(t, "MetricWidget", fin)
	a, b := deleting("MetricWidget", "a"), deleting("MetricWidget", "b")
	ctx := t.Context()
	w.Attempt(ctx, a, fin, errTimeout)
	w.Attempt(ctx, a, fin, errTimeout)
	w.Attempt(ctx, b, fin, errTimeout)
	clk.SetTime(t0.Add(10 * time.Minute))
	w.Attempt(ctx, a, fin, errTimeout)
	type gauges struct{ Pending, Blocked float64 }
	get := func() gauges {
		return gauges{gauge(t, pendingDeletions, "MetricWidget", fin), gauge(t, blockedDeletions, "MetricWidget", fin)}
	}
	if diff := cmp.Diff(gauges{Pending: 2, Blocked: 1}, get()); diff != "" {
		t.Errorf("after attempts (-want +got):\n%s", diff)
	}
	w.Done(ctx, a, fin)
	if n := w.Forget(b.GetUID()); n != 1 {
		t.Errorf("Forget dropped %d entries, want 1", n)
	}
	if diff := cmp.Diff(gauges{}, get()); diff != "" {
		t.Errorf("after Done and Forget (-want +got):\n%s", diff)
	}
	count, sum := histogram(t, "MetricWidget", fin)
	if diff := cmp.Diff([]float64{1, 600}, []float64{float64(count - countBefore), sum - sumBefore}); diff != "" {
		t.Errorf("age at completion [count sum] (-want +got):\n%s", diff)
	}
}

func TestValidate(t *testing.T) {
	if err := (Options{Threshold: -time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("Validate(-1s) = %v, want an error saying negative", err)
	}
	if got := New(Options{}).Threshold(); got != DefaultThreshold {
		t.Errorf("default threshold %s, want %s", got, DefaultThreshold)
	}
	defer func() {
		if recover() == nil {
			t.Error("New with a negative threshold did not panic")
		}
	}()
	New(Options{Threshold: -time.Second})
}

func TestSetCondition(t *testing.T) {
	at := metav1.NewTime(t0.Add(time.Hour))
	blocked := metav1.Condition{Type: ConditionType, Status: metav1.ConditionTrue, Reason: ReasonCleanupBlocked, Message: "m", LastTransitionTime: at, ObservedGeneration: 2}
	ready := map[string]any{"type": "Ready", "status": "False", "reason": "Deleting", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "extra": "kept"}
	old := map[string]any{"type": ConditionType, "status": "True", "reason": ReasonCleanupBlocked, "message": "older", "lastTransitionTime": "2026-05-21T11:00:00Z", "observedGeneration": int64(2)}
	item := func(status, msg, ltt string) map[string]any {
		return map[string]any{"type": ConditionType, "status": status, "reason": ReasonCleanupBlocked, "message": msg, "lastTransitionTime": ltt, "observedGeneration": int64(2)}
	}
	cases := map[string]struct {
		in          []any
		cond        metav1.Condition
		want        []any
		wantChanged bool
	}{
		"appended, others kept": {
			in: []any{ready}, cond: blocked,
			want: []any{ready, item("True", "m", "2026-05-21T12:14:55Z")}, wantChanged: true,
		},
		"same status keeps lastTransitionTime": {
			in: []any{old, ready}, cond: blocked,
			want: []any{item("True", "m", "2026-05-21T11:00:00Z"), ready}, wantChanged: true,
		},
		"identical is no change": {
			in: []any{item("True", "m", "2026-05-21T11:00:00Z")}, cond: blocked,
			want: []any{item("True", "m", "2026-05-21T11:00:00Z")}, wantChanged: false,
		},
		"status change moves lastTransitionTime": {
			in: []any{old},
			cond: func() metav1.Condition {
				c := blocked
				c.Status = metav1.ConditionFalse
				return c
			}(),
			want: []any{item("False", "m", "2026-05-21T12:14:55Z")}, wantChanged: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, changed := setCondition(tc.in, tc.cond)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
		})
	}
}

func counter(t *testing.T, v *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := v.WithLabelValues(labels...).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func gauge(t *testing.T, v *prometheus.GaugeVec, labels ...string) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := v.WithLabelValues(labels...).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func histogram(t *testing.T, kind, finalizer string) (uint64, float64) {
	t.Helper()
	m := &dto.Metric{}
	if err := ageAtCompletion.WithLabelValues(kind, finalizer).(prometheus.Histogram).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}
