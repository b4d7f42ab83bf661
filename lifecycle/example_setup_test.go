package lifecycle_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/controlplane"
	itestenv "github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/internal/widget"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/testenv"
)

// service is an external service of buckets in memory, shared by every
// client the pool dials: what a database or a SaaS API is to an operator.
type service struct {
	mu               sync.Mutex // guards the fields below
	sentinel, salt   string     // enrolled once by the ledger's first proof
	buckets          map[string]string
	deployment       string
	dials, creations int
}

func (s *service) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name := range s.buckets {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Setup with every guarantee on, against a real control plane: a pool of
// the service's clients, cleanup records in the operator's namespace, the
// hold on the connection object and its Secret, the watchdog and the
// sweeper. A Widget creates a bucket; deleting the Widget's whole
// namespace (the namespace controller deletes its objects in no useful
// order) still deletes the bucket first and removes its record, because
// the hold keeps the connection object until the Widget's cleanup is
// done.
func ExampleSetup() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctrl.SetLogger(logr.Discard())

	// The test environment: etcd, kube-apiserver and
	// kube-controller-manager on loopback, with the Widget CRD.
	scheme := testenv.Scheme()
	widget.AddToScheme(scheme)
	env, err := testenv.Start(ctx, testenv.Options{Scheme: scheme, Log: io.Discard,
		CRDs: []*apiextensionsv1.CustomResourceDefinition{itestenv.OpenCRD(widget.GroupVersion.WithKind("Widget"), "widgets", true)}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer env.Stop()
	c := env.Client
	for _, ns := range []string{"finale-system", "tenant"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			fmt.Println(err)
			return
		}
	}

	// The operator: one Setup call around the service's verbs.
	svc := &service{buckets: map[string]string{}, deployment: "buckets-1"}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	adapter := lifecycle.AdapterFuncs[*Widget, string, *service]{
		ConnectFn: func(ctx context.Context, w *Widget) (lifecycle.Connection[string], error) {
			var parent corev1.ConfigMap
			err := mgr.GetClient().Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: w.Spec.Parent}, &parent)
			if apierrors.IsNotFound(err) {
				return lifecycle.Connection[string]{}, nil // ParentNotFound, nothing created
			}
			return lifecycle.Connection[string]{Key: parent.Data["endpoint"], Parent: &parent}, err
		},
		ConnectParentFn: func(_ context.Context, p client.Object) (string, error) {
			return p.(*corev1.ConfigMap).Data["endpoint"], nil
		},
		// What makes sure a client reaches the service itself and not a copy
		// in its place: here the service is in this process, so nothing can
		// stand in the path. A networked service names its TLS check; Setup
		// refuses an adapter that says nothing (the sweeper could never act).
		AuthenticationFn: func(string) string { return "in-process: no network path" },
		// The service proves its deployment from inside (ledger.Respond),
		// with a token enrolled by the first proof.
		ProveFn: func(_ context.Context, s *service, q ledger.Question) (ledger.Answer, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if q.Enroll != nil && s.sentinel == "" {
				s.sentinel, s.salt = q.Enroll.Token, q.Enroll.Salt
			}
			a := ledger.Answer{Deployment: s.deployment, Salt: s.salt}
			for name, tag := range s.buckets {
				if q.Tag != "" && tag == q.Tag {
					a.Tagged = append(a.Tagged, name)
				}
			}
			slices.Sort(a.Tagged)
			a.Response = ledger.Respond(s.sentinel, q, a.Deployment, a.Salt, a.Tagged)
			return a, nil
		},
		ObserveFn: func(_ context.Context, s *service, _ *Widget, tag string) (lifecycle.Observation, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			var ids []string
			for name, t := range s.buckets {
				if t == tag {
					ids = append(ids, name)
				}
			}
			return lifecycle.Observation{IDs: ids, UpToDate: true}, nil
		},
		CreateFn: func(_ context.Context, s *service, w *Widget, tag string) (string, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.buckets[w.Spec.RoleName] = tag
			s.creations++
			return w.Spec.RoleName, nil
		},
		UpdateFn: func(context.Context, *service, *Widget, string, string) error { return nil },
		DeleteFn: func(_ context.Context, s *service, id, tag string) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.buckets[id] == tag { // only what carries the owner's tag
				delete(s.buckets, id)
			}
			return nil
		},
	}
	_, err = lifecycle.Setup(ctx, mgr, lifecycle.Kind[*Widget, *corev1.ConfigMap, string, *service]{
		Adapter: adapter,
		Dial: func(context.Context, string) (*service, error) {
			svc.mu.Lock()
			defer svc.mu.Unlock()
			svc.dials++
			return svc, nil
		},
		ParentName:       func(w *Widget) string { return w.Spec.Parent },
		SecretName:       func(p *corev1.ConfigMap) string { return p.Data["secret"] },
		RecordsNamespace: "finale-system",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	env.Go("manager", mgr.Start)

	// A tenant's connection object, its credential Secret and a Widget.
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "buckets-cred"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "buckets"},
			Data: map[string]string{"endpoint": "buckets.example:443", "secret": "buckets-cred"}},
		&Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "w"},
			Spec: widget.WidgetSpec{Parent: "buckets", RoleName: "bucket-w"}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			fmt.Println(err)
			return
		}
	}
	w := &Widget{}
	err = controlplane.WaitFor(ctx, 2*time.Minute, "Widget Ready", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "w"}, w)
		return err == nil && meta.IsStatusConditionTrue(w.Status.Conditions, lifecycle.ConditionReady), err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	parent := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "buckets"}, parent); err != nil {
		fmt.Println(err)
		return
	}
	record := &corev1.ConfigMap{}
	recordKey := client.ObjectKey{Namespace: "finale-system", Name: ledger.ConfigMapName(w.UID)}
	fmt.Println("buckets:", svc.names())
	fmt.Println("Widget finalizers:", w.Finalizers)
	fmt.Println("connection finalizers:", parent.Finalizers)
	fmt.Println("cleanup record written:", c.Get(ctx, recordKey, record) == nil)

	// The tenant's namespace goes, everything in it at once.
	if err := controlplane.DeleteAndWait(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, 3*time.Minute); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("namespace deleted; buckets:", svc.names())
	fmt.Println("cleanup record removed:", apierrors.IsNotFound(c.Get(ctx, recordKey, record)))
	svc.mu.Lock()
	fmt.Println("created once, dialled once:", svc.creations == 1, svc.dials == 1)
	svc.mu.Unlock()
	// Output:
	// buckets: [bucket-w]
	// Widget finalizers: [lifecycle.test.finale.dev/cleanup]
	// connection finalizers: [hold.finale.dev/hold]
	// cleanup record written: true
	// namespace deleted; buckets: []
	// cleanup record removed: true
	// created once, dialled once: true true
}
