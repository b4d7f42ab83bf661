package hold_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/ledger"
)

// pgTarget is a ledger.Target over one PostgreSQL connection: the
// deployment is proven by the reference operator's sentinel query, roles
// are found by the ownership tag in their comment, and deleted by exact
// name while they carry the tag.
// A pgx.Conn serves one query at a time and the sweeper works on several
// records at once, so calls are serialized by mu.
type pgTarget struct {
	conn *pgx.Conn
	mu   *sync.Mutex // guards conn
}

func newTarget(conn *pgx.Conn) pgTarget { return pgTarget{conn: conn, mu: &sync.Mutex{}} }

var _ ledger.Target = pgTarget{}

// sentinel: the roles of these tests carry their tag as the first word of
// their comment (the namespace follows, for the tests' own queries).
var sentinel = catalog.Sentinel{
	Table:      "finale_holdtest_sentinel",
	Deployment: catalog.SystemIdentifier,
	Tagged:     `SELECT rolname::text FROM pg_roles WHERE split_part(shobj_description(oid, 'pg_authid'), ' ', 1) = $3`,
}

// holdKey is the operator key of these tests' ledgers and sweepers.
var holdKey = ledger.GenerateKey()

func newLedger(t testing.TB, store ledger.Store, clk clock.PassiveClock) *ledger.Ledger {
	t.Helper()
	l, err := ledger.New(store, ledger.Options{Key: holdKey, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (p pgTarget) Prove(ctx context.Context, q ledger.Question) (ledger.Answer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return catalog.Prove(ctx, p.conn, sentinel, q)
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

// Delete drops role id while it carries tag.
func (p pgTarget) Delete(ctx context.Context, id, tag string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var got string
	err := p.conn.QueryRow(ctx, "SELECT split_part(coalesce(shobj_description(oid, 'pg_authid'), ''), ' ', 1) FROM pg_roles WHERE rolname = $1", id).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && got != tag) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = p.conn.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{id}.Sanitize())
	return err
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
