package capture_test

// The test owner kind (a small Job holding child results keyed by child UID)
// and its controller, which plays the owner whose workers can be stopped.

import (
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/capture"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
)

var jobGV = schema.GroupVersion{Group: "capture.test.finale.dev", Version: "v1"}

var jobKind = schema.GroupKind{Group: jobGV.Group, Kind: "Job"}

// Node phases and messages the test owner writes.
const (
	phaseRunning    = "Running"
	phaseSucceeded  = "Succeeded"
	phaseFailed     = "Failed"
	phaseError      = "Error"
	msgPodDeleted   = "pod deleted"
	byOwner         = "owner"
	byCapture       = "capture"
	captureFin      = "capture.test.finale.dev/result"
	naiveFin        = "naive.capture.test.finale.dev/status"
	jobLabel        = "capture.test.finale.dev/job"
	containerName   = "main"
	successfulWords = "capture-ok"
)

type Job struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              JobSpec   `json:"spec,omitempty"`
	Status            JobStatus `json:"status,omitempty"`
}

type JobSpec struct {
	Cancel bool `json:"cancel,omitempty"`
}

type JobStatus struct {
	Phase string `json:"phase,omitempty"`
	// Nodes by node name.
	Nodes map[string]Node `json:"nodes,omitempty"`
	// Results by child UID.
	Results map[string]Result `json:"results,omitempty"`
}

type Node struct {
	PodName string `json:"podName"`
	PodUID  string `json:"podUID"`
	Phase   string `json:"phase,omitempty"`
	Message string `json:"message,omitempty"`
}

type Result struct {
	Phase    string `json:"phase"`
	ExitCode int32  `json:"exitCode"`
	Message  string `json:"message,omitempty"`
	By       string `json:"by"`
}

type JobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Job `json:"items"`
}

func (j *Job) DeepCopyObject() runtime.Object {
	out := *j
	j.ObjectMeta.DeepCopyInto(&out.ObjectMeta) //nolint:staticcheck // explicit: the embedded field is what is copied
	out.Status.Nodes = nil
	out.Status.Results = nil
	if j.Status.Nodes != nil {
		out.Status.Nodes = make(map[string]Node, len(j.Status.Nodes))
		for k, v := range j.Status.Nodes {
			out.Status.Nodes[k] = v
		}
	}
	if j.Status.Results != nil {
		out.Status.Results = make(map[string]Result, len(j.Status.Results))
		for k, v := range j.Status.Results {
			out.Status.Results[k] = v
		}
	}
	return &out
}

func (l *JobList) DeepCopyObject() runtime.Object {
	out := &JobList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta) //nolint:staticcheck // explicit: the embedded field is what is copied
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopyObject().(*Job))
	}
	return out
}

func scheme() *runtime.Scheme {
	s := testenv.Scheme()
	s.AddKnownTypes(jobGV, &Job{}, &JobList{})
	metav1.AddToGroupVersion(s, jobGV)
	return s
}

func jobCRD() *apiextensionsv1.CustomResourceDefinition {
	return testenv.OpenCRD(jobGV.WithKind("Job"), "jobs", true)
}

// The owner's adapters, as a user would write them.
var (
	jobResults = capture.ResultReaderFn[*Job](func(j *Job, child types.UID) bool {
		_, ok := j.Status.Results[string(child)]
		return ok
	})
	jobWriter = capture.ResultWriterFn[*Job](func(j *Job, child client.Object) error {
		res, err := capture.PodResultOf(child)
		if err != nil {
			return err
		}
		if j.Status.Results == nil {
			j.Status.Results = map[string]Result{}
		}
		j.Status.Results[string(child.GetUID())] = resultOf(res, byCapture)
		return nil
	})
	jobCompletion = capture.CompletionFn[*Job](func(j *Job) bool {
		return j.Spec.Cancel || j.Status.Phase == phaseSucceeded || j.Status.Phase == phaseFailed
	})
)

func resultOf(res capture.PodResult, by string) Result {
	r := Result{Phase: string(res.Phase), By: by}
	for _, c := range res.Containers {
		if c.Name == containerName {
			r.ExitCode, r.Message = c.ExitCode, c.Message
		}
	}
	return r
}

// gate stops the owner's workers: while closed, every owner Reconcile blocks
// before it reads anything, as if the owner ran with zero workers.
type gate struct {
	mu sync.Mutex
	// ch is closed while the gate is open. Guarded by mu.
	ch chan struct{}
	// inside counts reconciles past the gate and not finished. Guarded by mu.
	inside int
}

func newGate(open bool) *gate {
	g := &gate{ch: make(chan struct{})}
	if open {
		close(g.ch)
	}
	return g
}

func (g *gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
	default:
		close(g.ch)
	}
}

// Close stops new reconciles and waits for those already past the gate, so
// that nothing the owner does afterwards races the test.
func (g *gate) Close(t testing.TB) {
	t.Helper()
	g.mu.Lock()
	select {
	case <-g.ch:
		g.ch = make(chan struct{})
	default:
	}
	g.mu.Unlock()
	err := controlplane.WaitFor(t.Context(), 30e9, "owner reconciles in flight to finish", func(context.Context) (bool, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.inside == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Enter waits until the gate is open; the caller calls the returned exit
// when its reconcile is over.
func (g *gate) Enter(ctx context.Context) (exit func(), err error) {
	for {
		g.mu.Lock()
		ch := g.ch
		select {
		case <-ch:
			g.inside++
			g.mu.Unlock()
			return func() {
				g.mu.Lock()
				g.inside--
				g.mu.Unlock()
			}, nil
		default:
		}
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ownerController records each node's result, as the upstream workflow
// controller does: from the result keyed by the Pod's UID if there is one,
// else from the Pod; a Pod that is gone without a result is "Error: pod
// deleted".
type ownerController struct {
	c    client.Client
	gate *gate

	mu sync.Mutex
	// errs counts failed reconciles and last is the latest one's error,
	// for a failing test to print. Guarded by mu.
	errs int
	last error
}

// failures says how many reconciles failed, and the last error.
func (o *ownerController) failures() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprintf("%d failed reconciles, the last: %v", o.errs, o.last)
}

func (o *ownerController) setup(mgr ctrl.Manager, name string) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&Job{}).
		Owns(&corev1.Pod{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(o)
}

func (o *ownerController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := o.reconcile(ctx, req)
	if err != nil {
		o.mu.Lock()
		o.errs, o.last = o.errs+1, err
		o.mu.Unlock()
	}
	return res, err
}

func (o *ownerController) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	exit, err := o.gate.Enter(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	defer exit()
	var job Job
	if err := o.c.Get(ctx, req.NamespacedName, &job); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if job.DeletionTimestamp != nil || len(job.Status.Nodes) == 0 || job.Status.Phase == phaseSucceeded || job.Status.Phase == phaseFailed {
		return reconcile.Result{}, nil
	}
	changed := false
	done, failed := 0, 0
	for name, node := range job.Status.Nodes {
		if node.Phase == phaseRunning || node.Phase == "" {
			if res, ok := job.Status.Results[node.PodUID]; ok {
				node.Phase, node.Message = res.Phase, res.Message
			} else {
				var pod corev1.Pod
				err := o.c.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: node.PodName}, &pod)
				switch {
				case apierrors.IsNotFound(err) || (err == nil && string(pod.UID) != node.PodUID):
					node.Phase, node.Message = phaseError, msgPodDeleted
				case err != nil:
					return reconcile.Result{}, err
				case capture.PodTerminal(&pod):
					res, err := capture.PodResultOf(&pod)
					if err != nil {
						return reconcile.Result{}, err
					}
					r := resultOf(res, byOwner)
					if job.Status.Results == nil {
						job.Status.Results = map[string]Result{}
					}
					job.Status.Results[node.PodUID] = r
					node.Phase, node.Message = r.Phase, r.Message
				default:
					node.Phase = phaseRunning
				}
			}
			if node != job.Status.Nodes[name] {
				job.Status.Nodes[name] = node
				changed = true
			}
		}
		switch node.Phase {
		case phaseSucceeded:
			done++
		case phaseFailed, phaseError:
			done++
			failed++
		}
	}
	phase := phaseRunning
	if done == len(job.Status.Nodes) {
		phase = phaseSucceeded
		if failed > 0 {
			phase = phaseFailed
		}
	}
	if phase != job.Status.Phase {
		job.Status.Phase = phase
		changed = true
	}
	if !changed {
		return reconcile.Result{}, nil
	}
	// A conflict is returned and retried with a fresh read.
	return reconcile.Result{}, o.c.Status().Update(ctx, &job)
}

// launch creates a Job and n Pods that it owns, each carrying fin, and
// records the nodes in the Job's status (the dispatch half of an owner).
func launch(t testing.TB, c client.Client, ns, name string, n int, fin string) (*Job, []*corev1.Pod) {
	t.Helper()
	ctx := t.Context()
	job := &Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Create(ctx, job); err != nil {
		t.Fatalf("create job: %v", err)
	}
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		pod := newPod(ns, fmt.Sprintf("%s-%d", name, i), fin)
		pod.Labels = map[string]string{jobLabel: name}
		if err := ctrl.SetControllerReference(job, pod, c.Scheme()); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatalf("create pod: %v", err)
		}
		pods = append(pods, pod)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return err
		}
		job.Status.Phase = phaseRunning
		job.Status.Nodes = map[string]Node{}
		for _, p := range pods {
			job.Status.Nodes[p.Name] = Node{PodName: p.Name, PodUID: string(p.UID), Phase: phaseRunning}
		}
		return c.Status().Update(ctx, job)
	})
	if err != nil {
		t.Fatalf("record nodes: %v", err)
	}
	return job, pods
}

func newPod(ns, name, fin string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: containerName, Image: "busybox:1.37"}}},
	}
	capture.Place(pod, fin)
	return pod
}

// succeed plays the kubelet: the container terminated with exit code 0 and
// a termination message, the Pod Succeeded.
func succeed(t testing.TB, c client.Client, pod *corev1.Pod, message string) {
	t.Helper()
	ctx := t.Context()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		now := metav1.Now()
		pod.Status.Phase = corev1.PodSucceeded
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now}}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name:  containerName,
			Image: "busybox:1.37",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", Message: message, StartedAt: now, FinishedAt: now,
			}},
		}}
		return c.Status().Update(ctx, pod)
	})
	if err != nil {
		t.Fatalf("set pod %s succeeded: %v", pod.Name, err)
	}
}

func getJob(t testing.TB, c client.Client, job *Job) *Job {
	t.Helper()
	var got Job
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(job), &got); err != nil {
		t.Fatalf("get job: %v", err)
	}
	return &got
}

func waitJobPhase(t testing.TB, c client.Client, job *Job, phase string) *Job {
	t.Helper()
	var got Job
	err := controlplane.WaitFor(t.Context(), 60e9, "job "+job.Name+" phase "+phase, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
			return false, err
		}
		return got.Status.Phase == phase, nil
	})
	if err != nil {
		t.Fatalf("%v; its status: phase %q, nodes %+v, results %+v", err, got.Status.Phase, got.Status.Nodes, got.Status.Results)
	}
	return &got
}
