package hold_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/ledger"
)

// pgTarget is a ledger.Target over one PostgreSQL connection: the
// deployment is proven by a sentinel row (deployment ID and a random
// token) created once in the server, roles are found by the ownership tag
// in their comment, and deleted by exact name.
// A pgx.Conn serves one query at a time and the sweeper works on several
// records at once, so calls are serialized by mu.
type pgTarget struct {
	conn *pgx.Conn
	mu   *sync.Mutex // guards conn
}

func newTarget(conn *pgx.Conn) pgTarget { return pgTarget{conn: conn, mu: &sync.Mutex{}} }

var _ ledger.Target = pgTarget{}

func (p pgTarget) Identify(ctx context.Context) (ledger.Identity, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var id ledger.Identity
	err := p.conn.QueryRow(ctx, "SELECT deployment, token FROM finale_holdtest_sentinel WHERE id = 1").Scan(&id.Deployment, &id.Token)
	if err != nil {
		return ledger.Identity{}, fmt.Errorf("read the deployment sentinel: %w", err)
	}
	return id, nil
}

func (p pgTarget) FindByTag(ctx context.Context, tag string) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rows, err := p.conn.Query(ctx, "SELECT rolname FROM pg_roles WHERE split_part(shobj_description(oid, 'pg_authid'), ' ', 1) = $1", tag)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (p pgTarget) Delete(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.conn.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{id}.Sanitize())
	return err
}

var (
	sentinelOnce sync.Once
	sentinelErr  error
)

// ensureSentinel creates the deployment sentinel once per PostgreSQL: what
// an operator does on first contact with a server.
func ensureSentinel(t testing.TB) {
	t.Helper()
	sentinelOnce.Do(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, admin(t).DSN())
		if err != nil {
			sentinelErr = err
			return
		}
		defer conn.Close(ctx)
		token := make([]byte, 32)
		_, _ = rand.Read(token)
		_, sentinelErr = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS finale_holdtest_sentinel
			(id int PRIMARY KEY CHECK (id = 1), deployment text NOT NULL, token bytea NOT NULL)`)
		if sentinelErr == nil {
			_, sentinelErr = conn.Exec(ctx, "INSERT INTO finale_holdtest_sentinel VALUES (1, gen_random_uuid()::text, $1) ON CONFLICT DO NOTHING", token)
		}
	})
	if sentinelErr != nil {
		t.Fatalf("deployment sentinel: %v", sentinelErr)
	}
}

// recordsNamespace is the operator's own namespace, where the ledger keeps
// its records (never the owners' namespaces).
const recordsNamespace = "holdtest-operator"

func ensureRecordsNamespace(t testing.TB, c client.Client) {
	t.Helper()
	err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: recordsNamespace}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func recordStore(t testing.TB, c client.Client) *ledger.ConfigMapStore {
	t.Helper()
	s, err := ledger.NewConfigMapStore(c, recordsNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// recordsIn returns the cleanup records whose owner lived in namespace ns.
func recordsIn(t testing.TB, s ledger.Store, ns string) []*ledger.Record {
	t.Helper()
	var out []*ledger.Record
	cont := ""
	for {
		page, err := s.List(context.Background(), 500, cont)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			if r.Owner.Namespace == ns {
				out = append(out, r)
			}
		}
		if cont = page.Continue; cont == "" {
			return out
		}
	}
}
