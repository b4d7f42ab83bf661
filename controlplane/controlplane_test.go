package controlplane_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const wait = 60 * time.Second

var widgetGVK = schema.GroupVersionKind{Group: "test.finale.dev", Version: "v1", Kind: "Widget"}

func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return testenv.OpenCRD(widgetGVK, "widgets", false)
}

func newWidget(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func TestNamespaceDeletionWaitsForFinalizers(t *testing.T) {
	ctx := t.Context()
	c := testenv.Client(t, testenv.Scheme())
	if err := controlplane.InstallCRDs(ctx, c, widgetCRD()); err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, c)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	w := newWidget(ns, "held")
	w.SetFinalizers([]string{"test.finale.dev/hold"})
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}

	if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitGone(ctx, c, cm, wait); err != nil {
		t.Fatal(err)
	}
	err := controlplane.WaitFor(ctx, wait, "namespace to report NamespaceFinalizersRemaining", func(ctx context.Context) (bool, error) {
		var got corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: ns}, &got); err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == corev1.NamespaceFinalizersRemaining && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatalf("widget with a finalizer is gone before its finalizer was removed: %v", err)
	}
	if w.GetDeletionTimestamp() == nil {
		t.Fatal("widget has no deletionTimestamp while its namespace terminates")
	}

	w.SetFinalizers(nil)
	if err := c.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitGone(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, wait); err != nil {
		t.Fatal(err)
	}
}

func TestOwnerGarbageCollection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy metav1.DeletionPropagation
	}{
		{"background", metav1.DeletePropagationBackground},
		{"foreground", metav1.DeletePropagationForeground},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			c := testenv.Client(t, testenv.Scheme())
			ns := testenv.Namespace(t, c)
			owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}
			if err := c.Create(ctx, owner); err != nil {
				t.Fatal(err)
			}
			child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: "child",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}},
			}}
			if err := c.Create(ctx, child); err != nil {
				t.Fatal(err)
			}
			if err := controlplane.DeleteAndWait(ctx, c, owner, wait, client.PropagationPolicy(tc.policy)); err != nil {
				t.Fatal(err)
			}
			if err := controlplane.WaitGone(ctx, c, child, wait); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRBACIsEnforcedForServiceAccounts(t *testing.T) {
	ctx := t.Context()
	cp := testenv.ControlPlane(t)
	admin := testenv.Client(t, testenv.Scheme())
	home := testenv.Namespace(t, admin)
	other := testenv.Namespace(t, admin)

	sa, err := client.New(cp.AsServiceAccount(home, "robot"), client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	cm := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "written"}}
	}
	if err := sa.Create(ctx, cm()); !apierrors.IsForbidden(err) {
		t.Fatalf("create without a Role: got %v, want Forbidden", err)
	}

	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "robot-configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: home, Name: "robot"}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// RBAC changes reach the authorizer through an informer: wait, do not sleep.
	err = controlplane.WaitFor(ctx, wait, "the Role to allow the write", func(ctx context.Context) (bool, error) {
		err := sa.Create(ctx, cm())
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sa.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "x"}}); !apierrors.IsForbidden(err) {
		t.Fatalf("create in a namespace the Role does not cover: got %v, want Forbidden", err)
	}
}

// TestStopLeavesNoProcess runs its own control plane, so it can stop it.
func TestStopLeavesNoProcess(t *testing.T) {
	cp, err := controlplane.Start(t.Context(), controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := cp.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion == "" || v.GitVersion == "v0.0.0-master" {
		t.Errorf("server version %q: the binaries are not version-stamped", v.GitVersion)
	}
	pids := cp.PIDs()
	if len(pids) != 3 {
		t.Fatalf("PIDs() = %v, want etcd, kube-apiserver and kube-controller-manager", pids)
	}
	dir := cp.Dir()
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		// Signal 0 probes existence; the children were reaped by Stop, so a
		// live PID here would be a leaked process.
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still running after Stop: %v", name, pid, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Stop left %s behind", dir)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestStartFailureReturnsLogTail(t *testing.T) {
	_, err := controlplane.Start(t.Context(), controlplane.Options{APIServerFlags: []string{"--no-such-flag"}})
	if err == nil {
		t.Fatal("Start with a bad apiserver flag succeeded")
	}
	if got := err.Error(); !strings.Contains(got, "kube-apiserver exited") || !strings.Contains(got, "no-such-flag") {
		t.Fatalf("error does not name the failing process and its log:\n%s", got)
	}
}

// TestCRDsAreWatchedFromTheStart: CRDs given to Start are watched by the
// garbage collector once Start returns, as in a cluster where they have
// been for a while. Installed after Start, they are watched only from the
// collector's next discovery, about 30 s later.
func TestCRDsAreWatchedFromTheStart(t *testing.T) {
	cp, err := controlplane.Start(t.Context(), controlplane.Options{CRDs: []*apiextensionsv1.CustomResourceDefinition{widgetCRD()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	hc, err := rest.HTTPClientFor(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing but the controller manager runs against this control plane.
	// Within 20 s: loaded, the collector may take seconds to start its
	// watches; a CRD it has to discover waits for its first resync, 30 s
	// after its start.
	err = controlplane.WaitFor(t.Context(), 20*time.Second, "the garbage collector to watch widgets", func(ctx context.Context) (bool, error) {
		return watched(ctx, hc, cp.Config.Host, widgetGVK.Group, "widgets")
	})
	if err != nil {
		t.Fatal(err)
	}
}

// watched reports whether the API server at host serves a watch on the
// resource, from its apiserver_longrunning_requests gauge.
func watched(ctx context.Context, hc *http.Client, host, group, resource string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/metrics", nil)
	if err != nil {
		return false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "apiserver_longrunning_requests{") && strings.Contains(l, `group="`+group+`"`) &&
			strings.Contains(l, `resource="`+resource+`"`) && strings.Contains(l, `verb="WATCH"`) && !strings.HasSuffix(l, " 0") {
			return true, nil
		}
	}
	return false, sc.Err()
}
