package clientpool_test

import (
	"context"
	"testing"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
)

// The pool exposes the classifier it evicts with, so that its other users
// (lifecycle) can use the same one instead of being given it again.
func TestPoolClassifier(t *testing.T) {
	dial := clientpool.DialFn[string, int](func(context.Context, string) (int, error) { return 0, nil })
	own := errclass.New()
	cases := map[string]struct {
		given, want *errclass.Classifier
	}{
		"given":   {given: own, want: own},
		"default": {given: nil, want: errclass.Default},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := clientpool.New(clientpool.Options[string, int]{Name: "classifier-" + name, Dial: dial, Classifier: tc.given})
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Classifier(); got != tc.want {
				t.Errorf("Classifier() = %p, want %p", got, tc.want)
			}
		})
	}
}
