package guard

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/capture"
)

// Finalizer is the guard's own finalizer on workflow Pods.
const Finalizer = "argo.finale.dev/result"

// DefaultName names the release controller and labels its metrics.
const DefaultName = "argo-guard"

// Argo's names (workflow/common at v4.1.4).
const (
	// AnnotationNodeID is the ID of the node a Pod runs: its key in
	// status.nodes.
	AnnotationNodeID = "workflows.argoproj.io/node-id"
	// LabelWorkflow is on every workflow Pod.
	LabelWorkflow = "workflows.argoproj.io/workflow"
)

// WorkflowKind is the owner kind the guard follows.
var WorkflowKind = schema.GroupKind{Group: "argoproj.io", Kind: "Workflow"}

// WorkflowGVK is the Workflow's served version.
var WorkflowGVK = WorkflowKind.WithVersion("v1alpha1")

// Node phases that Argo treats as final (NodeStatus.Fulfilled), and the
// Workflow phases that end a Workflow.
var (
	finalNodePhases     = map[string]bool{"Succeeded": true, "Failed": true, "Error": true, "Skipped": true, "Omitted": true}
	finalWorkflowPhases = map[string]bool{"Succeeded": true, "Failed": true, "Error": true}
)

// Options configure the guard. All are optional.
type Options struct {
	// Name of the release controller; DefaultName when empty.
	Name string
	// Clock measures how long a capture is pending (visibility only).
	Clock clock.PassiveClock
	// PendingThreshold: a Pod held longer is reported as overdue;
	// capture's default when zero.
	PendingThreshold time.Duration
	// Events receives Events; none when nil.
	Events capture.EventRecorder
	// Watchdog sees every held attempt and every release.
	Watchdog capture.Watchdog
	// MaxConcurrentReconciles of the release controller; 1 when zero.
	MaxConcurrentReconciles int
}

// Guard is the release controller for the guard's finalizer.
type Guard struct {
	rel *capture.Releaser[*unstructured.Unstructured]
}

// New returns a guard. live must read from the apiserver (not a cache):
// "Workflow not found" releases.
func New(live client.Reader, w capture.Writer, opts Options) (*Guard, error) {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	rel, err := capture.New(live, w, capture.Options[*unstructured.Unstructured]{
		Name:                    opts.Name,
		Finalizer:               Finalizer,
		OwnerKind:               WorkflowKind,
		NewOwner:                NewWorkflow,
		ChildResults:            capture.ChildResultReaderFn[*unstructured.Unstructured](Recorded),
		OwnerPersists:           true,
		Completion:              capture.CompletionFn[*unstructured.Unstructured](Finished),
		Clock:                   opts.Clock,
		PendingThreshold:        opts.PendingThreshold,
		Events:                  opts.Events,
		Watchdog:                opts.Watchdog,
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
	})
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	return &Guard{rel: rel}, nil
}

// SetupWithManager registers the release controller on the manager's Pods.
func (g *Guard) SetupWithManager(mgr ctrl.Manager) error { return g.rel.SetupWithManager(mgr) }

// Releaser is the capture release path the guard runs.
func (g *Guard) Releaser() *capture.Releaser[*unstructured.Unstructured] { return g.rel }

// NewWorkflow returns an empty Workflow.
func NewWorkflow() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(WorkflowGVK)
	return u
}

// Recorded reports whether wf has recorded the result of the node pod runs:
// the node's phase is final, or Argo took this very Pod's failure as a
// reason to restart the node (its restartingPodUID), which also needs the
// old Pod gone. A Pod without a node ID, or a Workflow whose nodes cannot
// be read, is not recorded: doubt keeps the finalizer.
func Recorded(wf *unstructured.Unstructured, pod client.Object) bool {
	id := pod.GetAnnotations()[AnnotationNodeID]
	if id == "" {
		return false
	}
	node, ok := nodeOf(wf, id)
	if !ok {
		return false
	}
	return finalNodePhases[node.Phase] || (node.RestartingPodUID != "" && node.RestartingPodUID == string(pod.GetUID()))
}

// nodeOf reads one node. It is called once per Pod for every Workflow
// version the guard sees, so it reads status.nodes in place (no copy, no
// decoding of the other nodes); only compressed nodes are decoded, once per
// Workflow version.
func nodeOf(wf *unstructured.Unstructured, id string) (Node, bool) {
	if raw, found, err := unstructured.NestedFieldNoCopy(wf.Object, "status", "nodes"); found && err == nil {
		nodes, ok := raw.(map[string]any)
		if !ok {
			return Node{}, false
		}
		n, ok := nodes[id].(map[string]any)
		if !ok {
			return Node{}, false
		}
		phase, _ := n["phase"].(string)
		restarting, _ := n["restartingPodUID"].(string)
		return Node{ID: id, Phase: phase, RestartingPodUID: restarting}, true
	}
	nodes, err := decoded.nodes(wf)
	if err != nil {
		return Node{}, false
	}
	n, ok := nodes[id]
	return n, ok
}

// decoded remembers the decoded nodes of the last few compressed Workflow
// versions.
var decoded = &nodeCache{entries: map[string]map[string]Node{}}

const nodeCacheSize = 16

type nodeCache struct {
	mu sync.Mutex // guards entries and order
	// entries by UID/resourceVersion.
	entries map[string]map[string]Node
	order   []string
}

func (c *nodeCache) nodes(wf *unstructured.Unstructured) (map[string]Node, error) {
	key := string(wf.GetUID()) + "/" + wf.GetResourceVersion()
	c.mu.Lock()
	n, ok := c.entries[key]
	c.mu.Unlock()
	if ok && wf.GetResourceVersion() != "" {
		return n, nil
	}
	n, err := Nodes(wf)
	if err != nil {
		return nil, err
	}
	if wf.GetResourceVersion() == "" {
		return n, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok {
		c.entries[key] = n
		c.order = append(c.order, key)
		if len(c.order) > nodeCacheSize {
			delete(c.entries, c.order[0])
			c.order = c.order[1:]
		}
	}
	return n, nil
}

// ShutdownTerminate is the spec.shutdown value of `argo terminate`.
const ShutdownTerminate = "Terminate"

// Finished reports whether wf no longer needs its Pods' results: its phase
// is final, or it is being terminated (spec.shutdown Terminate:
// cancellation).
//
// Decision: a Stop (spec.shutdown Stop) is not an end. Argo v4.1.4 stops a
// Workflow gracefully: it terminates the Pods still Pending or Running, but
// skips those that have finished, records their nodes from their results,
// and runs the exit handler, which reads them (workflow.status,
// workflow.failures, global outputs) and whose own Pods decide the
// Workflow's phase. Releasing a finished Pod at once on Stop would turn a
// succeeded step into "Error: pod deleted" in what the exit handler sees.
// So under Stop the rule waits, as for an active Workflow, until each node
// is recorded or the Workflow's phase is final; cancellation still ends,
// because Argo finishes a stopped Workflow. A Terminate runs no exit
// handler and abandons the run: it releases at once, so it never waits on
// lagging workers. Any other value is unknown: doubt keeps.
func Finished(wf *unstructured.Unstructured) bool {
	phase, _, _ := unstructured.NestedString(wf.Object, "status", "phase")
	shutdown, _, _ := unstructured.NestedString(wf.Object, "spec", "shutdown")
	return finalWorkflowPhases[phase] || shutdown == ShutdownTerminate
}

// Node is the part of an Argo node status the guard reads.
type Node struct {
	ID               string          `json:"id"`
	Phase            string          `json:"phase"`
	Message          string          `json:"message,omitempty"`
	RestartingPodUID string          `json:"restartingPodUID,omitempty"`
	Outputs          json.RawMessage `json:"outputs,omitempty"`
}

// ErrOffloaded means the Workflow's nodes live in Argo's database, not in
// the object.
var ErrOffloaded = errors.New("guard: the Workflow's nodes are offloaded to Argo's database and cannot be read from the object")

// Nodes reads status.nodes, or status.compressedNodes (gzip, base64) when
// Argo compressed them.
func Nodes(wf *unstructured.Unstructured) (map[string]Node, error) {
	status, _, _ := unstructured.NestedMap(wf.Object, "status")
	var raw []byte
	switch {
	case status["nodes"] != nil:
		b, err := json.Marshal(status["nodes"])
		if err != nil {
			return nil, fmt.Errorf("guard: status.nodes: %w", err)
		}
		raw = b
	case status["compressedNodes"] != nil:
		s, _ := status["compressedNodes"].(string)
		b, err := decompress(s)
		if err != nil {
			return nil, err
		}
		raw = b
	case status["offloadNodeStatusVersion"] != nil:
		return nil, ErrOffloaded
	default:
		return map[string]Node{}, nil
	}
	var nodes map[string]Node
	if err := json.Unmarshal(raw, &nodes); err != nil {
		return nil, fmt.Errorf("guard: decode nodes: %w", err)
	}
	return nodes, nil
}

// maxNodesSize bounds a decompressed node map (an object in etcd is at
// most 1.5 MiB; compressed nodes expand, but not by more than this).
const maxNodesSize = 64 << 20

func decompress(s string) ([]byte, error) {
	z, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("guard: status.compressedNodes is not base64: %w", err)
	}
	r, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, fmt.Errorf("guard: status.compressedNodes is not gzip: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxNodesSize+1))
	if err != nil {
		return nil, fmt.Errorf("guard: status.compressedNodes: %w", err)
	}
	if len(b) > maxNodesSize {
		return nil, fmt.Errorf("guard: status.compressedNodes expands past %d bytes", maxNodesSize)
	}
	return b, nil
}

// CheckPolicy returns nil when the admission policy that places Finalizer is
// installed and bound to the heartbeat Lease in heartbeatNamespace (the
// guard's namespace); otherwise a guard would run while new Pods go
// unprotected.
func CheckPolicy(ctx context.Context, r client.Reader, heartbeatNamespace string) error {
	return checkPolicy(ctx, r, heartbeatNamespace)
}
