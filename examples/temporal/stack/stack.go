package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/temporal/api/v1alpha1"
	"github.com/finale-dev/finale/examples/temporal/config/crd"
	"github.com/finale-dev/finale/examples/temporal/controller"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/watchdog"
)

// Defaults of Options.
const (
	DefaultCallTimeout   = 2 * time.Second
	DefaultRetryInterval = time.Second
	// DefaultWait bounds each wait for something the stack should do by
	// itself (a condition, a version registered, an object gone).
	DefaultWait = 90 * time.Second
)

// Names the stack gives what it creates in a namespace.
const (
	ConnectionName = "temporal"
	SecretName     = "temporal-api-key"
	APIKey         = "finale-test-key"
)

// RetrySpacing is the operator's retry spacing here: 200 ms doubling to
// 2 s per object, where lifecycle's default is 1 s doubling to 5 minutes,
// so that a run sees many retries within seconds. Both builds get it.
func RetrySpacing() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](200*time.Millisecond, 2*time.Second)
}

// Options say what to run.
type Options struct {
	// Config reaches the control plane as an administrator.
	Config *rest.Config
	// HostPort and Namespace are the Temporal frontend and a namespace on it.
	HostPort, Namespace string
	// Naive runs the baseline build (controller.Options.Naive).
	Naive bool
	// CallTimeout and RetryInterval tune the operator; zero is
	// DefaultCallTimeout and DefaultRetryInterval.
	CallTimeout, RetryInterval time.Duration
	// PoolName labels the operator's pool metrics; "" is derived from the
	// build, so that two stacks in one process do not share series.
	PoolName string
	// RateLimiter spaces the operator's retries of failed reconciles; nil
	// is RetrySpacing. lifecycle.DefaultRateLimiter is the production one.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
	// WatchNamespace, when set, limits the operator to that Kubernetes
	// namespace (which must exist), so that several stacks run in one
	// process side by side; "" is every namespace.
	WatchNamespace string
}

// Stack is a running operator with its fault proxy and the harness's
// clients.
type Stack struct {
	// C is an uncached administrator client of the control plane.
	C client.Client
	// Proxy sits between the operator and the Temporal frontend.
	Proxy *faultinject.Proxy
	// Clock is the operator's clock.
	Clock *clocktesting.FakeClock
	// Temporal is the harness's own SDK client, straight to the server.
	Temporal sdkclient.Client
	// Op is what the operator's Setup wired.
	Op *controller.Operator

	o      Options
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

var crdOnce sync.Map // *rest.Config -> struct{}: CRDs installed there

// Scheme knows the built-in kinds and the example's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// Start installs the CRDs (once per control plane), opens the proxy, dials
// the harness's client and starts the operator.
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	if o.Config == nil || o.HostPort == "" || o.Namespace == "" {
		return nil, errors.New("stack: Options.Config, HostPort and Namespace are required")
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.RateLimiter == nil {
		o.RateLimiter = RetrySpacing()
	}
	if o.PoolName == "" {
		o.PoolName = "temporal-stack"
		if o.Naive {
			o.PoolName += "-naive"
		}
	}
	scheme := Scheme()
	s := &Stack{o: o, Clock: clocktesting.NewFakeClock(time.Now()), done: make(chan error, 1)}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	if s.C, err = client.New(o.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("stack: admin client: %w", err)
	}
	if err := s.installCRDs(ctx); err != nil {
		return nil, err
	}
	if s.Proxy, err = faultinject.NewHTTP2Proxy(o.HostPort); err != nil {
		return nil, err
	}
	if s.Temporal, err = sdkclient.DialContext(ctx, sdkclient.Options{HostPort: o.HostPort, Namespace: o.Namespace, Identity: "finale-stack-harness", Logger: quiet}); err != nil {
		return nil, fmt.Errorf("stack: dial %s: %w", o.HostPort, err)
	}
	mo := manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if o.WatchNamespace != "" {
		mo.Cache.DefaultNamespaces = map[string]cache.Config{o.WatchNamespace: {}}
	}
	mgr, err := manager.New(o.Config, mo)
	if err != nil {
		return nil, fmt.Errorf("stack: manager: %w", err)
	}
	s.Op, err = controller.Setup(mgr, controller.Options{
		Naive: o.Naive, Clock: s.Clock, CallTimeout: o.CallTimeout, RetryInterval: o.RetryInterval,
		RateLimiter: o.RateLimiter, PoolName: o.PoolName, SkipNameValidation: true,
	})
	if err != nil {
		return nil, fmt.Errorf("stack: setup: %w", err)
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	go func() { s.done <- mgr.Start(mctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return nil, errors.New("stack: the operator's cache did not sync")
	}
	return s, nil
}

func (s *Stack) installCRDs(ctx context.Context) error {
	if _, done := crdOnce.Load(s.o.Config); done {
		return nil
	}
	crds, err := crd.CRDs()
	if err != nil {
		return err
	}
	if err := controlplane.InstallCRDs(ctx, s.C, crds...); err != nil {
		return err
	}
	err = controlplane.WaitFor(ctx, DefaultWait, "temporal.finale.dev kinds to be served", func(ctx context.Context) (bool, error) {
		for _, l := range []client.ObjectList{&v1alpha1.ConnectionList{}, &v1alpha1.WorkerDeploymentList{}} {
			if err := s.C.List(ctx, l); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err == nil {
		crdOnce.Store(s.o.Config, struct{}{})
	}
	return err
}

// Stop stops the operator and closes its clients, the proxy and the
// harness's client. Later calls return the same.
func (s *Stack) Stop() error {
	s.once.Do(func() {
		var errs []error
		if s.cancel != nil {
			s.cancel()
			errs = append(errs, <-s.done)
		}
		if s.Op != nil {
			errs = append(errs, s.Op.Pool.Close())
		}
		// The proxy before the harness's client: Close waits for stalled
		// connections, which only closing them ends.
		if s.Proxy != nil {
			errs = append(errs, s.Proxy.Close())
		}
		if s.Temporal != nil {
			s.Temporal.Close()
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}

// Namespace creates a fresh Kubernetes namespace.
func (s *Stack) Namespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := s.C.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("stack: create namespace: %w", err)
	}
	return ns.Name, nil
}

// Connection creates the Connection in ns, to the proxy, naming the
// API-key Secret (which it does not create: see APIKeySecret).
func (s *Stack) Connection(ctx context.Context, ns string) error {
	conn := &v1alpha1.Connection{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ConnectionName},
		Spec: v1alpha1.ConnectionSpec{
			HostPort: s.Proxy.Addr(), APIKeySecretRef: v1alpha1.SecretKeySelector{Name: SecretName}, Plaintext: true,
		},
	}
	if err := s.C.Create(ctx, conn); err != nil {
		return fmt.Errorf("stack: create Connection: %w", err)
	}
	return nil
}

// APIKeySecret creates the API-key Secret the Connection names.
func (s *Stack) APIKeySecret(ctx context.Context, ns string) error {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: SecretName},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{v1alpha1.DefaultAPIKeySecretKey: []byte(APIKey)},
	}
	if err := s.C.Create(ctx, sec); err != nil {
		return fmt.Errorf("stack: create Secret: %w", err)
	}
	return nil
}

// WorkerDeployment creates a WorkerDeployment named name in ns, for the
// server-side deployment "<ns>-<name>" (unique on a shared server).
func (s *Stack) WorkerDeployment(ctx context.Context, ns, name string) (*v1alpha1.WorkerDeployment, error) {
	w := &v1alpha1.WorkerDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.WorkerDeploymentSpec{
			ConnectionRef:     v1alpha1.ConnectionReference{Name: ConnectionName},
			TemporalNamespace: s.o.Namespace,
			DeploymentName:    ns + "-" + name,
		},
	}
	if err := s.C.Create(ctx, w); err != nil {
		return nil, fmt.Errorf("stack: create WorkerDeployment: %w", err)
	}
	return w, nil
}

// Tag is the ownership tag of w, the manager identity of its deployment.
func Tag(w *v1alpha1.WorkerDeployment) string {
	return ledger.Tag(ledger.Owner{Kind: "WorkerDeployment", UID: w.UID})
}

// WaitCondition waits until w's condition typ has status and reason and
// returns it.
func (s *Stack) WaitCondition(ctx context.Context, w *v1alpha1.WorkerDeployment, typ string, status metav1.ConditionStatus, reason string) (metav1.Condition, error) {
	var got metav1.Condition
	err := controlplane.WaitFor(ctx, DefaultWait, fmt.Sprintf("%s %s=%s (%s)", w.Name, typ, status, reason), func(ctx context.Context) (bool, error) {
		if err := s.C.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(w.Status.Conditions, typ)
		if c == nil || c.Status != status || c.Reason != reason {
			return false, nil
		}
		got = *c
		return true, nil
	})
	return got, err
}

// Describe describes the deployment through the harness's own client.
func (s *Stack) Describe(ctx context.Context, name string) (sdkclient.WorkerDeploymentDescribeResponse, error) {
	return s.Temporal.WorkerDeploymentClient().GetHandle(name).Describe(ctx, sdkclient.WorkerDeploymentDescribeOptions{})
}

// AddVersion makes build a version of the deployment through the
// harness's own client: see the function AddVersion.
func (s *Stack) AddVersion(ctx context.Context, deployment, build string) error {
	return AddVersion(ctx, s.Temporal, s.o.Namespace, deployment, build)
}

// AddVersion makes build a version of the deployment in the Temporal
// namespace ns the way the seed's workers do: a versioned SDK worker polls
// with it through c. It returns once the version is registered and, the
// worker stopped, no poller of it is left (a version with pollers cannot
// be deleted).
func AddVersion(ctx context.Context, c sdkclient.Client, ns, deployment, build string) error {
	tq := deployment + "-tq"
	w := worker.New(c, tq, worker.Options{
		DeploymentOptions: worker.DeploymentOptions{
			UseVersioning:             true,
			Version:                   worker.WorkerDeploymentVersion{DeploymentName: deployment, BuildID: build},
			DefaultVersioningBehavior: workflow.VersioningBehaviorPinned,
		},
	})
	w.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: "finale-noop"})
	if err := w.Start(); err != nil {
		return fmt.Errorf("stack: start worker of %s/%s: %w", deployment, build, err)
	}
	err := controlplane.WaitFor(ctx, DefaultWait, fmt.Sprintf("version %s of %s to be registered", build, deployment), func(ctx context.Context) (bool, error) {
		d, err := c.WorkerDeploymentClient().GetHandle(deployment).Describe(ctx, sdkclient.WorkerDeploymentDescribeOptions{})
		if err != nil {
			return false, nil
		}
		for _, v := range d.Info.VersionSummaries {
			if v.Version.BuildID == build {
				return true, nil
			}
		}
		return false, nil
	})
	w.Stop()
	if err != nil {
		return err
	}
	return controlplane.WaitFor(ctx, DefaultWait, fmt.Sprintf("no pollers of %s/%s", deployment, build), func(ctx context.Context) (bool, error) {
		n, err := pollers(ctx, c, ns, tq, deployment+":"+build)
		return err == nil && n == 0, nil
	})
}

// pollers counts the pollers the server remembers for one version of a
// task queue, the way it checks before deleting a version
// (CheckIfTaskQueuesHavePollers in go.temporal.io/server v1.32.1's
// workerdeployment package): with the enhanced DescribeTaskQueue, which
// the API marks deprecated and nothing replaces for a version's pollers.
//
//nolint:staticcheck // the server's own check before a version delete; no replacement reports a version's pollers
func pollers(ctx context.Context, c sdkclient.Client, ns, tq, version string) (int, error) {
	resp, err := c.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
		Namespace:      ns,
		TaskQueue:      &taskqueuepb.TaskQueue{Name: tq, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
		ApiMode:        enumspb.DESCRIBE_TASK_QUEUE_MODE_ENHANCED,
		Versions:       &taskqueuepb.TaskQueueVersionSelection{BuildIds: []string{version}},
		ReportPollers:  true,
		TaskQueueTypes: []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW, enumspb.TASK_QUEUE_TYPE_ACTIVITY},
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ti := range resp.GetVersionsInfo()[version].GetTypesInfo() {
		n += len(ti.GetPollers())
	}
	return n, nil
}

// Poison stalls every established connection through the proxy (the
// operator's cached client): PINGs answered, calls never.
func (s *Stack) Poison() (int, error) { return s.Proxy.Stall() }

// Touch annotates w, which makes the operator reconcile it on the main
// path.
func (s *Stack) Touch(ctx context.Context, w *v1alpha1.WorkerDeployment, value string) error {
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{"finale.dev/touched":%q}}}`, value)))
	return s.C.Patch(ctx, w, patch)
}

// Release removes every finalizer from w, so that a naive run that got
// stuck does not leave its object behind.
func (s *Stack) Release(ctx context.Context, w *v1alpha1.WorkerDeployment) error {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
	return client.IgnoreNotFound(s.C.Patch(ctx, w, patch))
}

// Exists reports whether w is still in the API server.
func (s *Stack) Exists(ctx context.Context, w *v1alpha1.WorkerDeployment) (bool, error) {
	err := s.C.Get(ctx, client.ObjectKeyFromObject(w), &v1alpha1.WorkerDeployment{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// WarningEvents lists the Warning Events with reason about w. An Event
// repeated by the recorder counts as often as its series says.
func (s *Stack) WarningEvents(ctx context.Context, w *v1alpha1.WorkerDeployment, reason string) (int, error) {
	var l eventsv1.EventList
	if err := s.C.List(ctx, &l, client.InNamespace(w.Namespace)); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range l.Items {
		if e.Regarding.UID != w.UID || e.Reason != reason || e.Type != corev1.EventTypeWarning {
			continue
		}
		if e.Series != nil && e.Series.Count > 1 {
			n += int(e.Series.Count)
		} else {
			n++
		}
	}
	return n, nil
}

// AgeDeletion sets the operator's clock to d after w's deletionTimestamp:
// the deletion has then been retried for d, as the watchdog measures it.
func (s *Stack) AgeDeletion(ctx context.Context, w *v1alpha1.WorkerDeployment, d time.Duration) error {
	if err := s.C.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		return err
	}
	if w.DeletionTimestamp == nil {
		return fmt.Errorf("stack: %s/%s is not being deleted", w.Namespace, w.Name)
	}
	s.Clock.SetTime(w.DeletionTimestamp.Add(d))
	return nil
}

// Attempts is how many cleanup attempts the watchdog has seen for w.
func (s *Stack) Attempts(w *v1alpha1.WorkerDeployment) int {
	for _, d := range s.Op.Watchdog.Pending() {
		if d.UID == w.UID {
			return d.Attempts
		}
	}
	return 0
}

// Blocked reports the watchdog's CleanupBlocked condition on w.
func Blocked(w *v1alpha1.WorkerDeployment) bool {
	return meta.IsStatusConditionTrue(w.Status.Conditions, watchdog.ConditionType)
}

// quiet drops the harness client's SDK log.
var quiet = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
