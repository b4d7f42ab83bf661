package keysoperator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/watchdog"
)

// Finalizer is the cleanup finalizer lifecycle puts on every Key.
const Finalizer = "keys.example.com/cleanup"

// ServiceConfigMap, in the operator's namespace, holds the key service's
// URL under "url".
const ServiceConfigMap = "key-service"

// Service is a client of the key service.
type Service struct {
	URL  string
	HTTP *http.Client
}

type key struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
	Tag  string `json:"tag"`
}

func (s *Service) call(ctx context.Context, method, path string, in, out any) error {
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, &body)
	if err != nil {
		return err
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case method == http.MethodDelete && resp.StatusCode == http.StatusNotFound:
		return nil // already gone
	case resp.StatusCode >= 300:
		return fmt.Errorf("key service: %s %s: %s", method, path, resp.Status)
	case out != nil:
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// adapter is everything lifecycle needs to know about Keys.
type adapter struct {
	c         client.Reader
	namespace string
}

func (a adapter) Connect(ctx context.Context, _ *Key) (lifecycle.Connection[string], error) {
	var cm corev1.ConfigMap
	if err := a.c.Get(ctx, client.ObjectKey{Namespace: a.namespace, Name: ServiceConfigMap}, &cm); err != nil {
		return lifecycle.Connection[string]{}, client.IgnoreNotFound(err)
	}
	return lifecycle.Connection[string]{Key: cm.Data["url"], Parent: &cm}, nil
}

// Prove asks the service to answer the ledger's question where it keeps
// its sentinel token: the operator never reads the token back.
func (a adapter) Prove(ctx context.Context, s *Service, q ledger.Question) (ledger.Answer, error) {
	var ans ledger.Answer
	err := s.call(ctx, http.MethodPost, "/prove", q, &ans)
	return ans, err
}

func (a adapter) Observe(ctx context.Context, s *Service, _ *Key, tag string) (lifecycle.Observation, error) {
	var keys []key
	err := s.call(ctx, http.MethodGet, "/keys?tag="+url.QueryEscape(tag), nil, &keys)
	obs := lifecycle.Observation{UpToDate: true}
	for _, k := range keys {
		obs.IDs = append(obs.IDs, k.ID)
	}
	return obs, err
}

func (a adapter) Create(ctx context.Context, s *Service, k *Key, tag string) (string, error) {
	var made key
	err := s.call(ctx, http.MethodPost, "/keys", key{Name: k.Spec.Name, Tag: tag}, &made)
	return made.ID, err
}

func (a adapter) Update(context.Context, *Service, *Key, string, string) error { return nil }

func (a adapter) Delete(ctx context.Context, s *Service, id, tag string) error {
	return s.call(ctx, http.MethodDelete, "/keys/"+url.PathEscape(id)+"?tag="+url.QueryEscape(tag), nil, nil)
}

// Setup registers the Key reconciler with mgr. The service's URL, the
// cleanup records and the records' key are in namespace, the operator's
// own. The connection object lives there too, outside the namespaces of
// the Keys, so no deletion hold is needed for it.
func Setup(ctx context.Context, mgr manager.Manager, namespace string) error {
	pool, err := clientpool.New(clientpool.Options[string, *Service]{
		Name: "keys",
		Dial: clientpool.DialFn[string, *Service](func(_ context.Context, u string) (*Service, error) {
			return &Service{URL: u, HTTP: &http.Client{Timeout: 10 * time.Second}}, nil
		}),
	})
	if err != nil {
		return err
	}
	store, err := ledger.NewConfigMapStore(mgr.GetClient(), namespace)
	if err != nil {
		return err
	}
	key, err := ledger.LoadKey(ctx, struct {
		client.Reader
		client.Writer
	}{mgr.GetAPIReader(), mgr.GetClient()}, namespace, "")
	if err != nil {
		return err
	}
	led, err := ledger.New(store, ledger.Options{Key: key})
	if err != nil {
		return err
	}
	r, err := lifecycle.New(mgr.GetClient(), func() *Key { return &Key{} }, adapter{mgr.GetClient(), namespace}, pool, lifecycle.Options{
		Finalizer: Finalizer,
		Scheme:    mgr.GetScheme(),
		Ledger:    led,
		Watchdog:  watchdog.New(watchdog.Options{Scheme: mgr.GetScheme()}),
		Skip:      lifecycle.SkipHold,
		APIReader: mgr.GetAPIReader(),
	})
	if err != nil {
		return err
	}
	return r.SetupWithManager(mgr, lifecycle.SetupOptions{})
}
