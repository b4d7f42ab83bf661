package ledger_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// ownerIn creates a real owner object (a ConfigMap in its own namespace) so
// that UIDs come from the apiserver.
func ownerIn(t *testing.T, c client.Client, ns, name string) ledger.Owner {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	return ledger.Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: name, UID: cm.UID}
}

// plainRecord is a consistent record for store-level tests (never signed).
func plainRecord(owner ledger.Owner) *ledger.Record {
	return &ledger.Record{Schema: ledger.SchemaVersion, Owner: owner, Policy: ledger.PolicyDelete, Deployment: "dep", Salt: "salt",
		Tag: ledger.Tag(owner), CreatedAt: t0, LastCreateAttempt: t0}
}

type env struct {
	c     client.Client
	store *ledger.ConfigMapStore
	clock *clocktesting.FakeClock
	key   ledger.Key
	l     *ledger.Ledger
	users string // namespace for owners
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := testenv.Client(t, testenv.Scheme())
	opNS := testenv.Namespace(t, c)
	store, err := ledger.NewConfigMapStore(c, opNS)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{c: c, store: store, clock: clocktesting.NewFakeClock(t0), key: ledger.GenerateKey(), users: testenv.Namespace(t, c)}
	e.l = e.ledger(t, store)
	return e
}

// ledger is another Ledger (another process, after a restart) with the
// same key over store.
func (e *env) ledger(t *testing.T, store ledger.Store) *ledger.Ledger {
	t.Helper()
	l, err := ledger.New(store, ledger.Options{Key: e.key, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (e *env) plan(owner ledger.Owner) ledger.Plan { return ledger.Plan{Owner: owner} }

func createRole(tg *pgtarget.Target, name string, calls interface{ Add(int32) int32 }) ledger.CreateFunc {
	return func(ctx context.Context, tag string) ([]string, error) {
		calls.Add(1)
		return []string{name}, tg.CreateRole(ctx, name, tag)
	}
}

// service is an external service in memory that answers questions as a
// genuine deployment does: pure decision tests only; the real-stack tests
// use pgtarget.
type service struct {
	deployment string
	mu         sync.Mutex // guards the fields below
	salt       string
	token      string
	tagged     map[string][]string // tag -> IDs
	deleted    []string
}

func (s *service) Prove(_ context.Context, q ledger.Question) (ledger.Answer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.salt == "" && q.Enroll != nil {
		s.salt, s.token = q.Enroll.Salt, q.Enroll.Token
	}
	ids := slices.Clone(s.tagged[q.Tag])
	if q.Tag == "" {
		ids = nil
	}
	return ledger.Answer{Deployment: s.deployment, Salt: s.salt, Tagged: ids, Response: ledger.Respond(s.token, q, s.deployment, s.salt, ids)}, nil
}

func (s *service) Delete(_ context.Context, id, tag string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.tagged[tag]
	if i := slices.Index(ids, id); i >= 0 {
		s.tagged[tag] = slices.Delete(ids, i, i+1)
		s.deleted = append(s.deleted, id)
	}
	return nil
}
