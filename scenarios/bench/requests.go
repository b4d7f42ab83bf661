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
	"github.com/finale-dev/finale/internal/procstat"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// requestsCPU is the CPU the stack's processes spend on
// guaranteeRequests(n), logged by process.
func (e *env) requestsCPU(ctx context.Context, n int) (time.Duration, error) {
	before, err := e.s.cpu()
	if err != nil {
		return 0, err
	}
	if err := e.guaranteeRequests(ctx, n); err != nil {
		return 0, err
	}
	after, err := e.s.cpu()
	if err != nil {
		return 0, err
	}
	e.s.logf("  the guarantees' API requests for %d Roles alone: CPU by process: %v", n, procstat.Sub(after, before, 0))
	return stackCPU(after, before), nil
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
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(lifecycle.DefaultWorkers)
	for i := range n {
		g.Go(func() error {
			var srv v1alpha1.Server
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "pg"}, &srv); err != nil {
				return err
			}
			sec := &metav1.PartialObjectMetadata{}
			sec.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: srv.Spec.CredentialsSecretRef.Name}, sec); err != nil {
				return err
			}
			r := benchRecord(e.ns, fmt.Sprintf("r%d", i), fmt.Sprintf("%s%d", e.prefix, i), &srv)
			if err := store.Put(ctx, r); err != nil {
				return err
			}
			return store.Delete(ctx, r)
		})
	}
	return g.Wait()
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
