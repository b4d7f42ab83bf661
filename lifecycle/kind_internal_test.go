package lifecycle

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/ledger"
)

type connectFn func(ctx context.Context, parent client.Object) (string, error)

func (f connectFn) ConnectParent(ctx context.Context, parent client.Object) (string, error) {
	return f(ctx, parent)
}

// The hold's default access check is ready exactly when a proof reached
// the service through a working client: an answer of any kind but one
// that blames the client.
func TestProofAccess(t *testing.T) {
	notEnrolled := errors.New("no identity enrolled for this operator key")
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	cases := map[string]struct {
		connectErr, dialErr, proveErr error
		want                          bool
	}{
		"proved":                        {want: true},
		"answered, nothing enrolled":    {proveErr: notEnrolled, want: true},
		"answered, not proven":          {proveErr: ledger.ErrNotProven, want: true},
		"parent has no usable key":      {connectErr: errors.New("credential Secret missing")},
		"dial failed":                   {dialErr: errors.New("read token Secret: not found")},
		"the call failed in transport":  {proveErr: refused},
		"the service refused the token": {proveErr: errRejected},
	}
	cl := errclass.New(func(_ context.Context, err error) (errclass.Class, bool) {
		if errors.Is(err, errRejected) {
			return errclass.Auth, true
		}
		return "", false
	})
	parent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pool, err := clientpool.New(clientpool.Options[string, int]{Name: "proof-access", Classifier: cl,
				Dial: clientpool.DialFn[string, int](func(context.Context, string) (int, error) { return 1, tc.dialErr })})
			if err != nil {
				t.Fatal(err)
			}
			var asked []ledger.Question
			prove := func(_ context.Context, _ int, q ledger.Question) (ledger.Answer, error) {
				asked = append(asked, q)
				return ledger.Answer{}, tc.proveErr
			}
			connect := connectFn(func(context.Context, client.Object) (string, error) { return "key", tc.connectErr })
			ready, err := proofAccess[string, int](pool, cl, connect, prove, "key-id").Ready(t.Context(), parent)
			if ready != tc.want || (err == nil) != tc.want {
				t.Errorf("Ready = %v, %v; want %v with an error exactly when not ready", ready, err, tc.want)
			}
			for _, q := range asked {
				if q.KeyID != "key-id" || q.Challenge == "" || q.Enroll != nil || q.Tag != "" {
					t.Errorf("asked %+v; want the operator key's ID, a fresh challenge, no enrolment, no tag", q)
				}
			}
		})
	}
}

var errRejected = errors.New("the service rejected the operator's token")

// A Kind's shared fields are told apart, so that a further kind setting
// one is refused.
func TestSharedSet(t *testing.T) {
	k := Kind[*corev1.ConfigMap, *corev1.ConfigMap, string, int]{
		Dial:        func(context.Context, string) (int, error) { return 0, nil },
		PoolOptions: clientpool.Options[string, int]{CallTimeout: 1},
		KeySecret:   "k",
	}
	if diff := cmp.Diff([]string{"Dial", "KeySecret", "PoolOptions"}, k.shared().set()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
