package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/clock"
)

// A NeedsAction's condition message is its action, never the chain around
// it: a dial that answers NeedsAction comes back from the pool wrapped with
// the pool's name and the connection key (the server's address), and a
// caller's wrapping says what the operator was doing.
func TestNeedsActionMessage(t *testing.T) {
	missing := errors.New(`Secret "admin" has no non-empty key "password": put the admin password there`)
	cases := map[string]struct {
		err  error
		want string
	}{
		"wrapped by the pool's dial": {
			err:  fmt.Errorf("clientpool pg: dial {10.0.0.7 5432 app}: %w", &NeedsAction{Reason: "AdminPasswordMissing", Err: missing}),
			want: missing.Error(),
		},
		"action and cause": {
			err:  fmt.Errorf("observe: %w", &NeedsAction{Reason: "InUse", Action: "disconnect the sessions", Err: errors.New("database in use: dial tcp 10.0.0.7:5432")}),
			want: "disconnect the sessions",
		},
		"bare": {
			err:  &NeedsAction{Reason: "Taken", Err: errors.New("the name is someone else's: choose another")},
			want: "the name is someone else's: choose another",
		},
		"empty": {
			err:  &NeedsAction{Reason: "Empty"},
			want: messageNeedsActionNone,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &Reconciler[*stringPolicy, string, int]{o: Options{Clock: clock.RealClock{}}}
			st := newStatus(r, &stringPolicy{})
			if _, err := r.failed(context.Background(), st, tc.err, ReasonReconcileError, messageError); err != nil {
				t.Fatalf("a NeedsAction is retried at RetryInterval, not returned: %v", err)
			}
			c := st.get(ConditionSynced)
			if c == nil {
				t.Fatal("no Synced condition")
			}
			na, _ := asNeedsAction(tc.err)
			if diff := cmp.Diff([2]string{na.Reason, tc.want}, [2]string{c.Reason, c.Message}); diff != "" {
				t.Errorf("Synced reason and message (-want +got):\n%s", diff)
			}
		})
	}
}
