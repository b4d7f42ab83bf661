package hold_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

func newRoleList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(roleGVK.GroupVersion().WithKind("RoleList"))
	return l
}

// sweepThrough runs one pass of the real sweeper (package sweep) over the
// operator's records, with a single candidate connection: server (another
// Server, in another namespace, reaching the same PostgreSQL). The settle
// window is measured on clk, which is moved past it first. It returns the
// pass's report.
func sweepThrough(t *testing.T, c client.Client, clk *clocktesting.FakeClock, server client.Object) sweep.Report {
	t.Helper()
	ctx := t.Context()
	clk.Step(sweep.DefaultSettle + sweep.DefaultMaxClockSkew + 1)
	var (
		mu    sync.Mutex // guards conns: the sweeper asks for targets concurrently
		conns []*pgx.Conn
	)
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}()
	s, err := sweep.New(sweep.Options{
		Ledger: newLedger(t, recordStore(t, c), clk),
		Owners: c,
		Live:   c,
		Targets: sweep.TargetsFn(func(ctx context.Context, _ *ledger.Record) ([]sweep.Candidate, error) {
			conn, err := connect(ctx, c, server)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			// The test's own connection to its own PostgreSQL: nothing in
			// the path to authenticate against.
			return []sweep.Candidate{{Name: "server " + server.GetName(), Target: newTarget(conn), Authentication: "the test's own connection"}}, nil
		}),
		Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
