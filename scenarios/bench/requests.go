package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// requestsCPU is the CPU the stack's processes spend on
// guaranteeRequests(n), logged by process.
func (e *env) requestsCPU(ctx context.Context, n int) (time.Duration, error) {
	byProcess, err := e.s.cpuOf(func() error { return e.guaranteeRequests(ctx, n) })
	if err != nil {
		return 0, err
	}
	e.s.logf("  the guarantees' API requests for %d Roles alone: CPU by process: %v", n, byProcess)
	return sumCPU(byProcess), nil
}

// guaranteeRequests sends, for each of n Roles, the API requests the
// guarantees add to its lifecycle and nothing else: its cleanup record
// written and removed (a record of the reference operator's size, through
// ledger.ConfigMapStore, the removal conditional on the version as
// Ledger.Cleanup's is) and, before its create, the live reads of its
// Server and the Server's credential Secret (lifecycle's confirmLive). As
// many at once as the operator has workers. What the stack's processes
// spend on them alone, against what the guarantees cost in the run, says
// whether anything else costs: sent alone they share less (etcd commits,
// connections, the API server's collections) than amid the run's other
// requests, so they may cost more alone than the guarantees cost there.
func (e *env) guaranteeRequests(ctx context.Context, n int) error {
	store, err := ledger.NewConfigMapStore(e.c, e.recNS)
	if err != nil {
		return err
	}
	return concurrently(ctx, n, func(ctx context.Context, i int) error {
		srv, _, err := e.readParent(ctx)
		if err != nil {
			return err
		}
		return e.writeRecord(ctx, store, i, srv)
	})
}

// concurrently calls f for each i below n, as many at once as the
// operator has workers.
func concurrently(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(lifecycle.DefaultWorkers)
	for i := range n {
		g.Go(func() error { return f(ctx, i) })
	}
	return g.Wait()
}

// readParent reads the run's Server and its credential Secret (metadata
// only) from the API server, as confirmLive does before a create.
func (e *env) readParent(ctx context.Context) (*v1alpha1.Server, *metav1.PartialObjectMetadata, error) {
	var srv v1alpha1.Server
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "pg"}, &srv); err != nil {
		return nil, nil, err
	}
	sec := &metav1.PartialObjectMetadata{}
	sec.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: srv.Spec.CredentialsSecretRef.Name}, sec); err != nil {
		return nil, nil, err
	}
	return &srv, sec, nil
}

// writeRecord writes the record of the run's i-th Role of srv and removes
// it, conditional on its version as Ledger.Cleanup's removal is.
func (e *env) writeRecord(ctx context.Context, store *ledger.ConfigMapStore, i int, srv *v1alpha1.Server) error {
	r := benchRecord(e.ns, fmt.Sprintf("r%d", i), fmt.Sprintf("%s%d", e.prefix, i), srv)
	if err := store.Put(ctx, r); err != nil {
		return err
	}
	return store.Delete(ctx, r)
}

// Requests is the result of RunRequests: the CPU the stack's processes
// spent on N of each pair of requests, four at a time, each summed over
// two rounds.
type Requests struct {
	N int
	// Record is a cleanup record written and removed, as the guarantees
	// do for each Role; Empty an empty ConfigMap created and deleted;
	// Reads the live reads of a Server and its Secret that the guarantees
	// make before each create.
	Record, Empty, Reads time.Duration
}

// RunRequests measures, on the stack's API server, what a cleanup
// record's write and removal cost against an empty ConfigMap's create and
// delete and against the two live reads: whether a record's
// size and layout, or each request's fixed cost, is what the records
// cost. The rounds run in a mirrored order (record, empty, reads, reads,
// empty, record), so that none profits from its place.
func RunRequests(ctx context.Context, s Stack, n int) (Requests, error) {
	if n <= 0 {
		return Requests{}, fmt.Errorf("bench: %d requests of each kind: give at least one", n)
	}
	e, err := s.setup(ctx)
	if err != nil {
		return Requests{}, err
	}
	defer e.close()
	store, err := ledger.NewConfigMapStore(e.c, e.recNS)
	if err != nil {
		return Requests{}, err
	}
	srv, _, err := e.readParent(ctx)
	if err != nil {
		return Requests{}, err
	}
	res := Requests{N: n}
	kinds := []struct {
		sum *time.Duration
		f   func(ctx context.Context, i int) error
	}{
		{&res.Record, func(ctx context.Context, i int) error { return e.writeRecord(ctx, store, i, srv) }},
		{&res.Empty, func(ctx context.Context, _ int) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.recNS, GenerateName: "finale-bench-"}}
			if err := e.c.Create(ctx, cm); err != nil {
				return err
			}
			return e.c.Delete(ctx, cm)
		}},
		{&res.Reads, func(ctx context.Context, _ int) error { _, _, err := e.readParent(ctx); return err }},
	}
	for _, k := range []int{0, 1, 2, 2, 1, 0} {
		byProcess, err := s.cpuOf(func() error { return concurrently(ctx, n, kinds[k].f) })
		if err != nil {
			return res, err
		}
		*kinds[k].sum += sumCPU(byProcess)
	}
	return res, nil
}

// benchRecord is a record as the reference operator writes one for the
// Role ns/name of srv, creating roleName: its fields have the real ones'
// lengths (a 16-byte salt and a SHA-256 MAC, in hex).
func benchRecord(ns, name, roleName string, srv *v1alpha1.Server) *ledger.Record {
	owner := ledger.Owner{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Role", Namespace: ns, Name: name, UID: uuid.NewUUID()}
	now := time.Now()
	return &ledger.Record{
		Schema: ledger.SchemaVersion, Owner: owner,
		Deployment: "7449822711012345678", Salt: strings.Repeat("5a", 16), Policy: ledger.PolicyDelete,
		Via:          &ledger.ConnectionRef{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Server", Namespace: ns, Name: srv.Name, UID: srv.UID},
		NamespaceUID: uuid.NewUUID(), Tag: ledger.Tag(owner), ExternalIDs: []string{roleName},
		MAC: strings.Repeat("a5", 32), CreatedAt: now, LastCreateAttempt: now,
	}
}
