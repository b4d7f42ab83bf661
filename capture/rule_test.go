package capture_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/capture"
)

// active is an owner that exists, is the referenced one, and needs results.
var active = capture.Facts{HasOwnerRef: true, OwnerFound: true, OwnerUIDMatches: true}

func with(f capture.Facts, mod func(*capture.Facts)) capture.Facts {
	mod(&f)
	return f
}

func TestRule(t *testing.T) {
	for name, tc := range map[string]struct {
		facts capture.Facts
		want  capture.Decision
	}{
		"orphan": {
			facts: capture.Facts{ChildTerminal: true, ChildDeleting: true},
			want:  capture.Decision{Action: capture.Release, Reason: capture.ReasonOrphan},
		},
		"owner not found": {
			facts: capture.Facts{HasOwnerRef: true, ChildDeleting: true},
			want:  capture.Decision{Action: capture.Release, Reason: capture.ReasonOwnerGone},
		},
		"owner replaced by another UID": {
			facts: capture.Facts{HasOwnerRef: true, OwnerFound: true, ChildTerminal: true, ChildDeleting: true},
			want:  capture.Decision{Action: capture.Release, Reason: capture.ReasonOwnerGone},
		},
		"owner deleting": {
			facts: with(active, func(f *capture.Facts) { f.OwnerDeleting = true }),
			want:  capture.Decision{Action: capture.Release, Reason: capture.ReasonOwnerDeleting},
		},
		"recorded, child running": {
			facts: with(active, func(f *capture.Facts) { f.Recorded = true }),
			want:  capture.Decision{Action: capture.Release, Reason: capture.ReasonRecorded},
		},
		"recorded and owner finished": {
			facts: with(active, func(f *capture.Facts) { f.Recorded, f.OwnerFinished = true, true }),
			want:  capture.Decision{Action: capture.Release, Reason: capture.ReasonRecorded},
		},
		"owner finished or cancelled": {
			facts: with(active, func(f *capture.Facts) { f.OwnerFinished = true }),
			want:  capture.Decision{Action: capture.Release, Reason: capture.ReasonOwnerFinished},
		},
		"terminal and deleting, not recorded: persist first": {
			facts: with(active, func(f *capture.Facts) { f.ChildTerminal, f.ChildDeleting = true, true }),
			want:  capture.Decision{Action: capture.Persist, Reason: capture.ReasonPersisted},
		},
		"deleting before it finished: hold": {
			facts: with(active, func(f *capture.Facts) { f.ChildDeleting = true }),
			want:  capture.Decision{Action: capture.Hold, Reason: capture.ReasonNotTerminal},
		},
		"terminal, not deleting: the owner's own loop records it": {
			facts: with(active, func(f *capture.Facts) { f.ChildTerminal = true }),
			want:  capture.Decision{Action: capture.Hold, Reason: capture.ReasonOwnerActive},
		},
		"deleting before it finished, namespace terminating": {
			facts: with(active, func(f *capture.Facts) { f.ChildDeleting, f.NamespaceTerminating = true, true }),
			want:  capture.Decision{Action: capture.Release, Reason: capture.ReasonNamespaceTerminating},
		},
		"terminal and deleting, namespace terminating: no persist into an owner that goes": {
			facts: with(active, func(f *capture.Facts) { f.ChildTerminal, f.ChildDeleting, f.NamespaceTerminating = true, true, true }),
			want:  capture.Decision{Action: capture.Release, Reason: capture.ReasonNamespaceTerminating},
		},
		"recorded, namespace terminating: recorded names it": {
			facts: with(active, func(f *capture.Facts) { f.Recorded, f.ChildDeleting, f.NamespaceTerminating = true, true, true }),
			want:  capture.Decision{Action: capture.Release, Reason: capture.ReasonRecorded},
		},
		"namespace terminating, child not deleted yet: the namespace controller deletes it first": {
			facts: with(active, func(f *capture.Facts) { f.NamespaceTerminating = true }),
			want:  capture.Decision{Action: capture.Hold, Reason: capture.ReasonOwnerActive},
		},
		"running": {
			facts: active,
			want:  capture.Decision{Action: capture.Hold, Reason: capture.ReasonOwnerActive},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, capture.Rule(tc.facts)); diff != "" {
				t.Errorf("Rule(%+v) (-want +got):\n%s", tc.facts, diff)
			}
		})
	}
}

// TestRuleNeverReleasesAnActiveOwnersUnrecordedResult checks every
// combination of child state against an active owner that has not recorded
// the result: none may release. (Time is not an input at all.)
func TestRuleNeverReleasesAnActiveOwnersUnrecordedResult(t *testing.T) {
	for _, terminal := range []bool{false, true} {
		for _, deleting := range []bool{false, true} {
			f := with(active, func(f *capture.Facts) { f.ChildTerminal, f.ChildDeleting = terminal, deleting })
			if got := capture.Rule(f); got.Action == capture.Release {
				t.Errorf("Rule(%+v) = %+v, want no release", f, got)
			}
		}
	}
}

func TestPodResultOf(t *testing.T) {
	terminated := func(code int32, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Completed", Message: msg}}}
	}
	for name, tc := range map[string]struct {
		pod     *corev1.Pod
		want    capture.PodResult
		wantErr error
	}{
		"succeeded": {
			pod:  &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{terminated(0, "ok")}}},
			want: capture.PodResult{Phase: corev1.PodSucceeded, Containers: []capture.ContainerResult{{Name: "main", ExitCode: 0, Reason: "Completed", Message: "ok"}}},
		},
		"failed": {
			pod:  &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{terminated(3, "boom")}}},
			want: capture.PodResult{Phase: corev1.PodFailed, Containers: []capture.ContainerResult{{Name: "main", ExitCode: 3, Reason: "Completed", Message: "boom"}}},
		},
		"running": {
			pod:     &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
			wantErr: capture.ErrNoResult,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := capture.PodResultOf(tc.pod)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PodResultOf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewRejectsIncompleteOptions(t *testing.T) {
	full := func() capture.Options[*Job] {
		return capture.Options[*Job]{
			Name: "x", OwnerKind: jobKind, NewOwner: func() *Job { return &Job{} },
			Results: jobResults, Writer: jobWriter,
		}
	}
	for name, tc := range map[string]struct {
		mod     func(*capture.Options[*Job])
		wantErr bool
	}{
		"complete":                    {mod: func(*capture.Options[*Job]) {}},
		"no name":                     {mod: func(o *capture.Options[*Job]) { o.Name = "" }, wantErr: true},
		"no owner kind":               {mod: func(o *capture.Options[*Job]) { o.OwnerKind.Kind = "" }, wantErr: true},
		"no owner factory":            {mod: func(o *capture.Options[*Job]) { o.NewOwner = nil }, wantErr: true},
		"no result reader":            {mod: func(o *capture.Options[*Job]) { o.Results = nil }, wantErr: true},
		"no result writer":            {mod: func(o *capture.Options[*Job]) { o.Writer = nil }, wantErr: true},
		"negative threshold":          {mod: func(o *capture.Options[*Job]) { o.PendingThreshold = -1 }, wantErr: true},
		"negative timeout":            {mod: func(o *capture.Options[*Job]) { o.ReleaseTimeout = -1 }, wantErr: true},
		"owner persists, no writer":   {mod: func(o *capture.Options[*Job]) { o.OwnerPersists, o.Writer = true, nil }},
		"owner persists and a writer": {mod: func(o *capture.Options[*Job]) { o.OwnerPersists = true }, wantErr: true},
		"child result reader instead": {mod: func(o *capture.Options[*Job]) {
			o.Results, o.ChildResults = nil, capture.ChildResultReaderFn[*Job](func(*Job, client.Object) bool { return false })
		}},
		"both result readers": {mod: func(o *capture.Options[*Job]) {
			o.ChildResults = capture.ChildResultReaderFn[*Job](func(*Job, client.Object) bool { return false })
		}, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			o := full()
			tc.mod(&o)
			c := noClient{}
			_, err := capture.New[*Job](c, c, o)
			if (err != nil) != tc.wantErr {
				t.Errorf("New: err = %v, want error: %v", err, tc.wantErr)
			}
		})
	}
}

// noClient satisfies the client roles for New, which only validates; any
// call would panic, proving New makes none.
type noClient struct{ client.Client }
