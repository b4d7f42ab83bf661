package sweep_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

// partialStore is the test's ConfigMapStore whose next List, once armed,
// ends the pass before it has seen every record: it answers the
// continuation with an expired token, as the API server does once etcd
// compacted the revision, or it returns a first page that holds none of
// the records and cancels the pass's context.
type partialStore struct {
	*ledger.ConfigMapStore
	expire bool               // answer the next continuation with 410 Expired
	cancel context.CancelFunc // return an empty first page, then cancel
}

func (s *partialStore) List(ctx context.Context, limit int64, cont string) (ledger.Page, error) {
	switch {
	case s.expire && cont != "":
		s.expire = false
		return ledger.Page{}, apierrors.NewResourceExpired("the provided continue parameter is too old")
	case s.expire:
		p, err := s.ConfigMapStore.List(ctx, limit, cont)
		if p.Continue == "" {
			p.Continue = "next" // so that the continuation comes
		}
		p.Records, p.Invalid = nil, nil // the kept record is on a later page
		return p, err
	case s.cancel != nil:
		cancel := s.cancel
		s.cancel = nil
		cancel()
		return ledger.Page{Continue: "next"}, nil
	}
	return s.ConfigMapStore.List(ctx, limit, cont)
}

// TestPartialPassForgetsNothing: a pass that ends before it has listed every
// record (an expired continue token, the pass's context ending between
// pages) concludes nothing about the records it did not see: the kept
// record it did not reach keeps its backoff, and the next full pass backs
// off from it rather than trying it again at once.
func TestPartialPassForgetsNothing(t *testing.T) {
	for name, arm := range map[string]func(s *partialStore, cancel context.CancelFunc){
		"continue token expired":      func(s *partialStore, _ context.CancelFunc) { s.expire = true },
		"context ended between pages": func(s *partialStore, cancel context.CancelFunc) { s.cancel = cancel },
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			ps := &partialStore{ConfigMapStore: e.store}
			l, err := ledger.New(ps, ledger.Options{Key: e.key, Clock: e.clock})
			if err != nil {
				t.Fatal(err)
			}
			o := newWidget(t, e.c, e.users, "lost")
			e.create(t, o, e.a)
			e.deleteOwner(t, o)
			e.clock.Step(settled)
			b, _ := pgtarget.Fresh(t, testenv.Postgres(t)) // not the record's deployment: it is kept
			opts := e.options(e.c, b)
			opts.Ledger = l
			s, err := sweep.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			if rep, err := s.Pass(t.Context()); err != nil || rep.Unreachable != 1 {
				t.Fatalf("first pass: %+v, %v; want the record unreachable", rep, err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			arm(ps, cancel)
			if _, err := s.Pass(ctx); err == nil {
				t.Fatal("partial pass: no error, want the reason it ended")
			}
			rep, err := s.Pass(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(sweep.Report{Unreachable: 1, BackingOff: 1}, rep); diff != "" {
				t.Errorf("the full pass after the partial one (-want +got):\n%s", diff)
			}
		})
	}
}
