package scenarios

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/capture"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/faultinject"
)

// ResultLookup says whether an owner holds the result of a child (by the
// child's UID), and what the owner concluded about that child.
type ResultLookup interface {
	Result(ctx context.Context, child types.UID) (phase string, ok bool, err error)
}

// ResultLookupFn adapts a function to ResultLookup.
type ResultLookupFn func(ctx context.Context, child types.UID) (string, bool, error)

// Result calls f.
func (f ResultLookupFn) Result(ctx context.Context, child types.UID) (string, bool, error) {
	return f(ctx, child)
}

// CheckNoLostResult checks the no-lost-result invariant: each child that
// finished with phase want[uid] has that result recorded in its owner.
func CheckNoLostResult(ctx context.Context, owner ResultLookup, want map[types.UID]string) ([]Violation, error) {
	uids := make([]string, 0, len(want))
	for u := range want {
		uids = append(uids, string(u))
	}
	sort.Strings(uids)
	var out []Violation
	for _, u := range uids {
		got, ok, err := owner.Result(ctx, types.UID(u))
		if err != nil {
			return nil, err
		}
		if !ok || got != want[types.UID(u)] {
			out = append(out, Violation{NoLostResult, fmt.Sprintf("child %s finished %s; owner recorded %q (found %v)", u, want[types.UID(u)], got, ok)})
		}
	}
	return out, nil
}

// The owner kind of the G3 scenario: a small Job that records its Pods'
// results by Pod UID, as Argo's Workflow records node results.
var jobGV = schema.GroupVersion{Group: "scenarios.finale.dev", Version: "v1"}

const (
	phaseSucceeded = "Succeeded"
	phaseError     = "Error"
	msgPodDeleted  = "pod deleted"
	byOwner        = "owner"
	byCapture      = "capture"
	naiveFinalizer = "naive.scenarios.finale.dev/status"
	naiveDelay     = 2 * time.Minute
	jobLabel       = "scenarios.finale.dev/job"
	podsPerJob     = 3
)

type job struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              jobSpec   `json:"spec,omitempty"`
	Status            jobStatus `json:"status,omitempty"`
}

type jobSpec struct {
	Pods []string `json:"pods,omitempty"`
}

type jobStatus struct {
	Phase string `json:"phase,omitempty"`
	// Nodes by Pod name: what the owner concluded.
	Nodes map[string]jobNode `json:"nodes,omitempty"`
	// Results by Pod UID.
	Results map[string]jobResult `json:"results,omitempty"`
}

type jobNode struct {
	Phase   string `json:"phase,omitempty"`
	Message string `json:"message,omitempty"`
}

type jobResult struct {
	Pod   string `json:"pod"`
	Phase string `json:"phase"`
	By    string `json:"by"`
}

type jobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []job `json:"items"`
}

func (j *job) DeepCopyObject() runtime.Object {
	out := *j
	j.ObjectMeta.DeepCopyInto(&out.ObjectMeta) //nolint:staticcheck // explicit: the embedded field is what is copied
	out.Spec.Pods = append([]string(nil), j.Spec.Pods...)
	out.Status.Nodes, out.Status.Results = nil, nil
	if j.Status.Nodes != nil {
		out.Status.Nodes = make(map[string]jobNode, len(j.Status.Nodes))
		for k, v := range j.Status.Nodes {
			out.Status.Nodes[k] = v
		}
	}
	if j.Status.Results != nil {
		out.Status.Results = make(map[string]jobResult, len(j.Status.Results))
		for k, v := range j.Status.Results {
			out.Status.Results[k] = v
		}
	}
	return &out
}

func (l *jobList) DeepCopyObject() runtime.Object {
	out := &jobList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta) //nolint:staticcheck // explicit: the embedded field is what is copied
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopyObject().(*job))
	}
	return out
}

func jobCRD() *apiextensionsv1.CustomResourceDefinition {
	obj := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "jobs." + jobGV.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: jobGV.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "jobs", Singular: "job", Kind: "Job", ListKind: "JobList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: jobGV.Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": obj, "status": obj},
				}},
			}},
		},
	}
}

// jobOwner is the owner's own controller: it records the results of its
// Pods it can still read, and marks a node "Error: pod deleted" when its
// Pod is gone and no result was recorded: the seed's loss, made visible.
type jobOwner struct {
	live client.Reader
	c    client.Client
}

func (o *jobOwner) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var j job
	if err := o.live.Get(ctx, req.NamespacedName, &j); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	orig := j.DeepCopyObject().(*job)
	if j.Status.Nodes == nil {
		j.Status.Nodes = map[string]jobNode{}
	}
	if j.Status.Results == nil {
		j.Status.Results = map[string]jobResult{}
	}
	done := 0
	for _, name := range j.Spec.Pods {
		var pod corev1.Pod
		err := o.live.Get(ctx, types.NamespacedName{Namespace: j.Namespace, Name: name}, &pod)
		switch {
		case err == nil && capture.PodTerminal(&pod):
			if _, ok := j.Status.Results[string(pod.UID)]; !ok {
				j.Status.Results[string(pod.UID)] = jobResult{Pod: name, Phase: string(pod.Status.Phase), By: byOwner}
			}
			j.Status.Nodes[name] = jobNode{Phase: string(pod.Status.Phase)}
			done++
		case err == nil:
			j.Status.Nodes[name] = jobNode{Phase: "Running"}
		case apierrors.IsNotFound(err):
			n := j.Status.Nodes[name]
			if n.Phase == "" || n.Phase == "Running" {
				n = jobNode{Phase: phaseError, Message: msgPodDeleted}
				// The release path may have persisted the result of this
				// node's Pod while the owner lagged.
				for _, r := range j.Status.Results {
					if r.Pod == name {
						n = jobNode{Phase: r.Phase}
					}
				}
			}
			j.Status.Nodes[name] = n
			done++
		default:
			return reconcile.Result{}, err
		}
	}
	if done == len(j.Spec.Pods) {
		j.Status.Phase = phaseSucceeded
		for _, n := range j.Status.Nodes {
			if n.Phase != phaseSucceeded {
				j.Status.Phase = phaseError
			}
		}
	}
	if equalStatus(orig.Status, j.Status) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, o.c.Status().Update(ctx, &j)
}

func equalStatus(a, b jobStatus) bool {
	if a.Phase != b.Phase || len(a.Nodes) != len(b.Nodes) || len(a.Results) != len(b.Results) {
		return false
	}
	for k, v := range a.Nodes {
		if b.Nodes[k] != v {
			return false
		}
	}
	for k, v := range a.Results {
		if b.Results[k] != v {
			return false
		}
	}
	return true
}

// naiveRelease is upstream's behaviour in the seed: the finalizer goes once
// naiveDelay has passed since the Pod's last condition transition, whatever
// the owner has persisted.
type naiveRelease struct {
	c     client.Client
	clock clock.PassiveClock
}

func (n *naiveRelease) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	if err := n.c.Get(ctx, req.NamespacedName, &pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pod.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(&pod, naiveFinalizer) {
		return reconcile.Result{}, nil
	}
	var last time.Time
	for _, c := range pod.Status.Conditions {
		if c.LastTransitionTime.After(last) {
			last = c.LastTransitionTime.Time
		}
	}
	if left := naiveDelay - n.clock.Since(last); left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	orig := pod.DeepCopy()
	controllerutil.RemoveFinalizer(&pod, naiveFinalizer)
	return reconcile.Result{}, client.IgnoreNotFound(n.c.Patch(ctx, &pod, client.MergeFrom(orig)))
}

// runLaggingOwner is G3: a Job's Pods finish while the Job's own workers
// are paused; the Pods are deleted after upstream's two-minute timer has
// passed (a clock jump). The capture release path persists each result to
// the Job before it lets the Pod go; the naive timer lets the Pods go
// unrecorded, and the resumed owner concludes "Error: pod deleted".
func runLaggingOwner(ctx context.Context, env Env, out io.Writer, naive bool) (Result, error) {
	var r Result
	if env.ControlPlane == nil {
		return r, ErrEnv
	}
	scheme := newScheme()
	scheme.AddKnownTypeWithName(jobGV.WithKind("Job"), &job{})
	scheme.AddKnownTypeWithName(jobGV.WithKind("JobList"), &jobList{})
	metav1.AddToGroupVersion(scheme, jobGV)
	c, err := client.New(env.ControlPlane.Config, client.Options{Scheme: scheme})
	if err != nil {
		return r, err
	}
	if err := controlplane.InstallCRDs(ctx, c, jobCRD()); err != nil {
		return r, fmt.Errorf("install the Job CRD: %w", err)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lagging-owner-"}}
	if err := c.Create(ctx, nsObj); err != nil {
		return r, err
	}
	ns := nsObj.Name
	clk := clocktesting.NewFakeClock(time.Now())

	mgr, err := ctrl.NewManager(env.ControlPlane.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return r, err
	}
	gate := &faultinject.Gate{Inner: &jobOwner{live: mgr.GetAPIReader(), c: mgr.GetClient()}}
	gate.Pause()
	r.fault(FaultPausedWorkers)
	if err := ctrl.NewControllerManagedBy(mgr).Named("scenarios-job-owner").For(&job{}).Owns(&corev1.Pod{}).Complete(gate); err != nil {
		return r, err
	}
	fin := capture.DefaultFinalizer
	if naive {
		fin = naiveFinalizer
		n := &naiveRelease{c: mgr.GetClient(), clock: clk}
		if err := ctrl.NewControllerManagedBy(mgr).Named("scenarios-naive-release").For(&corev1.Pod{}).Complete(n); err != nil {
			return r, err
		}
	} else {
		rel, err := capture.New(mgr.GetAPIReader(), mgr.GetClient(), capture.Options[*job]{
			Name:      "scenarios-capture",
			OwnerKind: schema.GroupKind{Group: jobGV.Group, Kind: "Job"},
			NewOwner:  func() *job { return &job{} },
			Results: capture.ResultReaderFn[*job](func(j *job, child types.UID) bool {
				_, ok := j.Status.Results[string(child)]
				return ok
			}),
			Writer: capture.ResultWriterFn[*job](func(j *job, child client.Object) error {
				res, err := capture.PodResultOf(child)
				if err != nil {
					return err
				}
				if j.Status.Results == nil {
					j.Status.Results = map[string]jobResult{}
				}
				j.Status.Results[string(child.GetUID())] = jobResult{Pod: child.GetName(), Phase: string(res.Phase), By: byCapture}
				return nil
			}),
			Completion: capture.CompletionFn[*job](func(j *job) bool { return j.Status.Phase != "" }),
			Clock:      clk,
		})
		if err != nil {
			return r, err
		}
		if err := rel.SetupWithManager(mgr); err != nil {
			return r, err
		}
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(mctx) }()
	defer func() { cancel(); <-done }()

	j := &job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wf"}}
	for i := range podsPerJob {
		j.Spec.Pods = append(j.Spec.Pods, fmt.Sprintf("wf-%d", i))
	}
	if err := c.Create(ctx, j); err != nil {
		return r, err
	}
	want := map[types.UID]string{}
	var pods []client.Object
	for _, name := range j.Spec.Pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{jobLabel: j.Name},
				Finalizers:      []string{fin},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(j, jobGV.WithKind("Job"))}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.37"}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			return r, err
		}
		now := metav1.NewTime(clk.Now())
		pod.Status = corev1.PodStatus{
			Phase:      corev1.PodSucceeded,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: "capture-ok", FinishedAt: now}}}},
		}
		if err := c.Status().Update(ctx, pod); err != nil {
			return r, fmt.Errorf("set Pod %s Succeeded: %w", name, err)
		}
		want[pod.UID] = phaseSucceeded
		pods = append(pods, pod)
	}
	say(out, "Job %s/%s: %d Pods Succeeded while the Job's workers are paused", ns, j.Name, len(pods))
	clk.Step(naiveDelay + time.Minute)
	r.fault(FaultClockJump)
	for _, p := range pods {
		if err := c.Delete(ctx, p); err != nil {
			return r, err
		}
	}
	vs, err := CheckFinished(ctx, c, env.bound(), pods...)
	if err != nil {
		return r, err
	}
	r.add(vs...)
	say(out, "Pods deleted and gone: %v; resuming the Job's workers", len(vs) == 0)
	gate.Resume()
	err = controlplane.WaitFor(ctx, env.bound(), "the resumed owner to conclude every node", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(j), j); err != nil {
			return false, err
		}
		return j.Status.Phase != "", nil
	})
	if err != nil {
		return r, err
	}
	names := make([]string, 0, len(j.Status.Nodes))
	for name := range j.Status.Nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		n := j.Status.Nodes[name]
		r.note("node %s: %s %s", name, n.Phase, n.Message)
	}
	by := map[string]int{}
	for _, res := range j.Status.Results {
		by[res.By]++
	}
	r.note("results recorded by the capture release path: %d, by the owner: %d", by[byCapture], by[byOwner])
	vs, err = CheckNoLostResult(ctx, ResultLookupFn(func(ctx context.Context, child types.UID) (string, bool, error) {
		res, ok := j.Status.Results[string(child)]
		return res.Phase, ok, nil
	}), want)
	if err != nil {
		return r, err
	}
	r.add(vs...)
	if j.Status.Phase != phaseSucceeded {
		r.add(Violation{NoLostResult, fmt.Sprintf("Job %s/%s concluded %s although every Pod succeeded", ns, j.Name, j.Status.Phase)})
	}
	say(out, "Job concluded %s; results recorded %d of %d", j.Status.Phase, len(j.Status.Results), len(pods))
	return r, client.IgnoreNotFound(c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
}
