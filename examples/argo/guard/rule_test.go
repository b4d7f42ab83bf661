package guard_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/finale-dev/finale/examples/argo/guard"
)

func workflow(status map[string]any, spec map[string]any) *unstructured.Unstructured {
	wf := guard.NewWorkflow()
	if status != nil {
		wf.Object["status"] = status
	}
	if spec != nil {
		wf.Object["spec"] = spec
	}
	return wf
}

func nodes(id, phase string, extra map[string]any) map[string]any {
	n := map[string]any{"id": id, "phase": phase}
	for k, v := range extra {
		n[k] = v
	}
	return map[string]any{"nodes": map[string]any{id: n}}
}

func compressed(t *testing.T, json string) map[string]any {
	t.Helper()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	if _, err := z.Write([]byte(json)); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return map[string]any{"compressedNodes": base64.StdEncoding.EncodeToString(b.Bytes())}
}

func pod(nodeID, uid string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: types.UID("uid-" + uid)}}
	if nodeID != "" {
		p.Annotations = map[string]string{guard.AnnotationNodeID: nodeID}
	}
	return p
}

func TestRecorded(t *testing.T) {
	for name, tc := range map[string]struct {
		wf   *unstructured.Unstructured
		pod  *corev1.Pod
		want bool
	}{
		"succeeded":                      {workflow(nodes("n1", "Succeeded", nil), nil), pod("n1", "a"), true},
		"failed":                         {workflow(nodes("n1", "Failed", nil), nil), pod("n1", "a"), true},
		"error (Argo's own verdict)":     {workflow(nodes("n1", "Error", nil), nil), pod("n1", "a"), true},
		"running":                        {workflow(nodes("n1", "Running", nil), nil), pod("n1", "a"), false},
		"pending":                        {workflow(nodes("n1", "Pending", nil), nil), pod("n1", "a"), false},
		"another node":                   {workflow(nodes("n2", "Succeeded", nil), nil), pod("n1", "a"), false},
		"no node-id annotation":          {workflow(nodes("n1", "Succeeded", nil), nil), pod("", "a"), false},
		"no status":                      {workflow(nil, nil), pod("n1", "a"), false},
		"restart of this very Pod":       {workflow(nodes("n1", "Pending", map[string]any{"restartingPodUID": "uid-a"}), nil), pod("n1", "a"), true},
		"restart of another Pod":         {workflow(nodes("n1", "Pending", map[string]any{"restartingPodUID": "uid-b"}), nil), pod("n1", "a"), false},
		"compressed, succeeded":          {workflow(compressed(t, `{"n1":{"id":"n1","phase":"Succeeded"}}`), nil), pod("n1", "a"), true},
		"compressed, running":            {workflow(compressed(t, `{"n1":{"id":"n1","phase":"Running"}}`), nil), pod("n1", "a"), false},
		"compressed, corrupt":            {workflow(map[string]any{"compressedNodes": "not base64!"}, nil), pod("n1", "a"), false},
		"offloaded (unreadable): keep":   {workflow(map[string]any{"offloadNodeStatusVersion": "fnv:1"}, nil), pod("n1", "a"), false},
		"malformed nodes (a list): keep": {workflow(map[string]any{"nodes": []any{"x"}}, nil), pod("n1", "a"), false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := guard.Recorded(tc.wf, tc.pod); got != tc.want {
				t.Errorf("Recorded = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFinished(t *testing.T) {
	for name, tc := range map[string]struct {
		wf   *unstructured.Unstructured
		want bool
	}{
		"running":                 {workflow(map[string]any{"phase": "Running"}, nil), false},
		"no status":               {workflow(nil, nil), false},
		"succeeded":               {workflow(map[string]any{"phase": "Succeeded"}, nil), true},
		"failed":                  {workflow(map[string]any{"phase": "Failed"}, nil), true},
		"error":                   {workflow(map[string]any{"phase": "Error"}, nil), true},
		"terminated (cancelled)":  {workflow(map[string]any{"phase": "Running"}, map[string]any{"shutdown": "Terminate"}), true},
		"stopped (still running)": {workflow(map[string]any{"phase": "Running"}, map[string]any{"shutdown": "Stop"}), false},
		"stopped and failed":      {workflow(map[string]any{"phase": "Failed"}, map[string]any{"shutdown": "Stop"}), true},
		"unknown shutdown value":  {workflow(map[string]any{"phase": "Running"}, map[string]any{"shutdown": "Pause"}), false},
		"suspended is not an end": {workflow(map[string]any{"phase": "Running"}, map[string]any{"suspend": true}), false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := guard.Finished(tc.wf); got != tc.want {
				t.Errorf("Finished = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNodes(t *testing.T) {
	got, err := guard.Nodes(workflow(compressed(t, `{"n1":{"id":"n1","phase":"Succeeded","message":"m","restartingPodUID":"u"}}`), nil))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]guard.Node{"n1": {ID: "n1", Phase: "Succeeded", Message: "m", RestartingPodUID: "u"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Nodes (-want +got):\n%s", diff)
	}
	if _, err := guard.Nodes(workflow(map[string]any{"offloadNodeStatusVersion": "fnv:1"}, nil)); !errors.Is(err, guard.ErrOffloaded) {
		t.Errorf("offloaded: err = %v, want ErrOffloaded", err)
	}
}
