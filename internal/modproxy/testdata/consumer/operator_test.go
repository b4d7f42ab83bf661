package keysoperator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard()) // the manager's log is not what this test reads
	s := testenv.Scheme()
	utilruntime.Must(AddToScheme(s))
	testenv.Main(m, testenv.Options{CRDPaths: []string{"config/crd"}, Scheme: s},
		func(e *testenv.Env) error { env = e; return nil })
}

// TestNamespaceDeletionLeaksNothing: keys made for a namespace's Keys are
// gone from the service, with their cleanup records, once the namespace is.
func TestNamespaceDeletionLeaksNothing(t *testing.T) {
	ctx := t.Context()
	svc := newKeyService(t)
	c := env.Client

	system := testenv.Namespace(t, c)
	if err := c.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: ServiceConfigMap},
		Data:       map[string]string{"url": svc.URL},
	}); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(ctx, mgr, system); err != nil {
		t.Fatal(err)
	}
	env.GoFor(t, mgr.Start)

	tenant := testenv.Namespace(t, c)
	const n = 3
	for i := range n {
		k := &Key{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "key-" + strconv.Itoa(i)}, Spec: KeySpec{Name: "ci-" + strconv.Itoa(i)}}
		if err := c.Create(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	store, err := ledger.NewConfigMapStore(c, system)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, "every Key to have its key, its finalizer and its record", func(ctx context.Context) (bool, error) {
		var keys KeyList
		if err := c.List(ctx, &keys, client.InNamespace(tenant)); err != nil {
			return false, err
		}
		for _, k := range keys.Items {
			if !slices.Contains(k.Finalizers, Finalizer) {
				return false, nil
			}
		}
		page, err := store.List(ctx, 0, "")
		return svc.count() == n && len(page.Records) == n, err
	})

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}
	if err := controlplane.DeleteAndWait(ctx, c, ns, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	page, err := store.List(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if left := svc.count(); left != 0 || len(page.Records) != 0 {
		t.Fatalf("namespace gone, but %d key(s) left in the service and %d cleanup record(s) left", left, len(page.Records))
	}
}

func wait(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := controlplane.WaitFor(t.Context(), time.Minute, what, cond); err != nil {
		t.Fatal(err)
	}
}

// keyService is the key service the operator manages, on loopback.
type keyService struct {
	*httptest.Server
	mu        sync.Mutex // guards keys, next and sentinels
	keys      map[string]key
	next      int
	sentinels map[string]ledger.Enrollment // by operator key ID
}

func newKeyService(t *testing.T) *keyService {
	s := &keyService{keys: map[string]key{}, sentinels: map[string]ledger.Enrollment{}}
	mux := http.NewServeMux()
	// The proof is computed here, where the sentinel's token is kept.
	mux.HandleFunc("POST /prove", func(w http.ResponseWriter, r *http.Request) {
		var q ledger.Question
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.sentinels[q.KeyID]; !ok && q.Enroll != nil {
			s.sentinels[q.KeyID] = *q.Enroll
		}
		sent := s.sentinels[q.KeyID]
		a := ledger.Answer{Deployment: "ci", Salt: sent.Salt}
		for _, k := range s.keys {
			if q.Tag != "" && k.Tag == q.Tag {
				a.Tagged = append(a.Tagged, k.ID)
			}
		}
		a.Response = ledger.Respond(sent.Token, q, a.Deployment, a.Salt, a.Tagged)
		_ = json.NewEncoder(w).Encode(a)
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		out := []key{}
		for _, k := range s.keys {
			if k.Tag == r.URL.Query().Get("tag") {
				out = append(out, k)
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /keys", func(w http.ResponseWriter, r *http.Request) {
		var k key
		if err := json.NewDecoder(r.Body).Decode(&k); err != nil || k.Name == "" || k.Tag == "" {
			http.Error(w, "name and tag required", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.next++
		k.ID = "k" + strconv.Itoa(s.next)
		s.keys[k.ID] = k
		_ = json.NewEncoder(w).Encode(k)
	})
	mux.HandleFunc("DELETE /keys/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		k, ok := s.keys[r.PathValue("id")]
		if !ok || k.Tag != r.URL.Query().Get("tag") {
			http.NotFound(w, r)
			return
		}
		delete(s.keys, k.ID)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *keyService) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}
