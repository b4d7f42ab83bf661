package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/capture"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/argo/guard"
	argo "github.com/finale-dev/finale/examples/argo/stack"
	"github.com/finale-dev/finale/internal/testenv"
)

// probeSlack is what may pass between a heartbeat's expiry and the first
// dry-run Pod that goes unmarked: the request time the policy reads is in
// whole seconds, the probes are PollInterval apart, and the apiserver's
// parameter informer learns of a Lease write within milliseconds.
const probeSlack = 2*time.Second + controlplane.PollInterval

// TestPolicyMarksOnlyWhileTheGuardLives: the policy adds the finalizer only
// while the guard's heartbeat Lease is fresh. A Lease renewed with a
// duration of 4 s keeps new workflow Pods marked until it expires and not
// after (the first unmarked dry-run Pod ends past the expiry and starts
// within probeSlack of it); renewed again, Pods are marked again; without
// a Lease (never run, or uninstalled) nothing is marked.
func TestPolicyMarksOnlyWhileTheGuardLives(t *testing.T) {
	const beat = 4 * time.Second
	c := testenv.Client(t, testenv.Scheme())
	ctx := t.Context()
	ns := testenv.Namespace(t, c)
	if err := argo.InstallPolicy(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	hb, err := guard.NewHeartbeat(c, c, guard.HeartbeatOptions{Namespace: ns, Identity: "test", Duration: beat})
	if err != nil {
		t.Fatal(err)
	}
	if err := hb.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	var lease coordinationv1.Lease
	if err := c.Get(ctx, hb.Key(), &lease); err != nil {
		t.Fatal(err)
	}
	expiry := lease.Spec.RenewTime.Add(beat)
	var start, end time.Time
	err = controlplane.WaitFor(ctx, beat+30*time.Second, "the heartbeat to expire", func(ctx context.Context) (bool, error) {
		start = time.Now()
		marked, err := argo.Marked(ctx, c, ns)
		end = time.Now()
		return !marked, err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first unmarked dry-run Pod: started %s after the heartbeat's expiry, ended %s after it", start.Sub(expiry), end.Sub(expiry))
	if end.Before(expiry) {
		t.Errorf("a new workflow Pod went unmarked at %s, before the heartbeat's expiry %s", end.Format(time.RFC3339Nano), expiry.Format(time.RFC3339Nano))
	}
	if late := start.Sub(expiry); late > probeSlack {
		t.Errorf("new workflow Pods were still marked %s after the heartbeat expired; want at most %s", late, probeSlack)
	}
	if err := hb.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := argo.WaitMarked(ctx, c, ns, true, 10*time.Second); err != nil {
		t.Fatalf("renewed: %v", err)
	}
	if err := c.Delete(ctx, &lease); err != nil {
		t.Fatal(err)
	}
	if err := argo.WaitMarked(ctx, c, ns, false, 10*time.Second); err != nil {
		t.Fatalf("no heartbeat Lease: %v", err)
	}
}

// TestGuardDown: the guard going down, on the stock controller. The guard
// (heartbeat 4 s) marks a Pod, then stops. The Pod's Workflow is deleted:
// the Pod, Succeeded with its output reported, is deleted and held by the
// guard's finalizer alone once Argo's cleanup has removed its own. Within
// the heartbeat's duration new workflow Pods stop getting the finalizer (a
// Pod Argo creates then has Argo's only); finale audit reports the held
// Pod at once, as a finding, naming the guard's expired Lease. The guard
// comes back: it releases the held Pod by capture's rule (its Workflow is
// gone) and new Pods are marked again.
func TestGuardDown(t *testing.T) {
	const beat = 4 * time.Second
	auditBin := buildAudit(t)
	w := newWorldWith(t, &argo.GuardOptions{Heartbeat: guard.HeartbeatOptions{Duration: beat}})
	ctx := t.Context()
	pod := runningPod(t, w, "before")
	if err := argo.ReportOutputs(ctx, w.c, pod, argo.Output); err != nil {
		t.Fatal(err)
	}
	if err := argo.SucceedPod(ctx, w.c, pod, argo.SeedAge); err != nil {
		t.Fatal(err)
	}

	if err := w.guard.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if err := w.c.Delete(ctx, argo.Workflow(w.ns, "before")); err != nil {
		t.Fatal(err)
	}
	err := controlplane.WaitFor(ctx, 90*time.Second, "Pod "+pod.Name+" deleted and held by the guard's finalizer alone", func(ctx context.Context) (bool, error) {
		var got corev1.Pod
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			return false, err
		}
		return got.DeletionTimestamp != nil && slices.Equal(got.Finalizers, []string{guard.Finalizer}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := argo.WaitMarked(ctx, w.c, w.ns, false, beat+probeSlack+10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("new workflow Pods unmarked %s after the guard stopped (heartbeat %s)", time.Since(stopped), beat)
	if d := time.Since(stopped); d > beat+probeSlack+5*time.Second {
		t.Errorf("new workflow Pods went unmarked %s after the guard stopped; want within its heartbeat (%s) and slack", d, beat)
	}

	// A Workflow submitted now: Argo's Pod has Argo's finalizer only.
	if err := w.ctl.Restart(argo.SeedWorkers); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Create(ctx, argo.Workflow(w.ns, "after")); err != nil {
		t.Fatal(err)
	}
	after, err := argo.WaitPods(ctx, w.c, w.ns, "after", 1, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{argo.FinalizerStatus}, after[0].Finalizers); diff != "" {
		t.Errorf("Pod created while the guard was down: finalizers (-want +got):\n%s", diff)
	}

	rep, code := runAudit(t, auditBin)
	if code != 2 {
		t.Errorf("finale audit exited %d, want 2 (findings)", code)
	}
	lease := w.ns + "/" + guard.HeartbeatName
	var found bool
	for _, d := range rep.Deletions {
		if d.Kind != "Pod" || d.Namespace != w.ns || d.Name != pod.Name {
			continue
		}
		found = true
		want := auditDeletion{Kind: "Pod", Namespace: w.ns, Name: pod.Name, Finalizers: []string{guard.Finalizer}, HolderDown: true,
			Holders: []auditHolder{{Finalizer: guard.Finalizer, Lease: lease, Expired: true}}}
		if diff := cmp.Diff(want, d); diff != "" {
			t.Errorf("finale audit's entry for the held Pod (-want +got):\n%s", diff)
		}
	}
	if !found {
		t.Errorf("finale audit does not list the held Pod %s/%s: %+v", w.ns, pod.Name, rep.Deletions)
	}
	if !slices.ContainsFunc(rep.HoldersDown, func(h auditHolderDown) bool { return h.Lease == lease && h.Objects == 1 }) {
		t.Errorf("finale audit's holders down = %+v, want %s holding 1 object", rep.HoldersDown, lease)
	}

	// The guard is back.
	g := w.startGuard(t, argo.GuardOptions{Heartbeat: guard.HeartbeatOptions{Duration: beat}})
	if err := controlplane.WaitGone(ctx, w.c, pod, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitReleases(t, g, map[capture.Reason]int{capture.ReasonOwnerGone: 1})
	if err := argo.WaitMarked(ctx, w.c, w.ns, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// The part of finale audit's JSON report these tests read.
type (
	auditReport struct {
		Deletions   []auditDeletion   `json:"stuckDeletions"`
		HoldersDown []auditHolderDown `json:"holdersDown"`
	}
	auditDeletion struct {
		Kind       string        `json:"kind"`
		Namespace  string        `json:"namespace"`
		Name       string        `json:"name"`
		Finalizers []string      `json:"finalizers"`
		Holders    []auditHolder `json:"holders"`
		HolderDown bool          `json:"holderDown"`
	}
	auditHolder struct {
		Finalizer string `json:"finalizer"`
		Lease     string `json:"lease"`
		Expired   bool   `json:"expired"`
	}
	auditHolderDown struct {
		Lease   string `json:"lease"`
		Objects int    `json:"objects"`
	}
)

// buildAudit builds finale's command (cmd/finale, in the library module)
// and returns the binary.
func buildAudit(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Build(t, root, "./cmd/finale")
}

// runAudit runs finale audit -o json against the control plane.
func runAudit(t *testing.T, bin string) (auditReport, int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, "audit", "--kubeconfig", testenv.ControlPlane(t).Kubeconfig, "-o", "json")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("finale audit: %v", err)
	}
	var rep auditReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("finale audit's report: %v\n%s", err, out)
	}
	return rep, code
}
