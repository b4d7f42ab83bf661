package controlplane_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/finale-dev/finale/controlplane"
)

// Options.APIServers: a control plane of its own with two kube-apiservers
// on one etcd, the second behind its etcd link; the subtests share it, one
// after the other (each leaves the link healed).
func TestTwoAPIServers(t *testing.T) {
	t.Parallel()
	cp := startTwo(t)
	t.Run("lag", func(t *testing.T) { testLag(t, cp) })
	t.Run("partition", func(t *testing.T) { testPartition(t, cp) })
	t.Run("failover", func(t *testing.T) { testFailover(t, cp) })
}

// startTwo starts a control plane of its own with two apiservers.
func startTwo(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	cp, err := controlplane.Start(t.Context(), controlplane.Options{APIServers: 2, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	if got := len(cp.APIServers()); got != 2 {
		t.Fatalf("%d apiservers, want 2", got)
	}
	return cp
}

func clientset(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// watcher watches ConfigMaps in ns through cs from the current version and
// reports each added object's name and when it arrived.
type arrival struct {
	name string
	at   time.Time
}

func watchConfigMaps(t *testing.T, cs kubernetes.Interface, ns string) <-chan arrival {
	t.Helper()
	ctx := t.Context()
	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	out := make(chan arrival, 16)
	go func() {
		for e := range w.ResultChan() {
			if cm, ok := e.Object.(*corev1.ConfigMap); ok && e.Type == watch.Added {
				out <- arrival{cm.Name, time.Now()}
			}
		}
	}()
	return out
}

// awaitName waits for name to arrive on ch, for at most timeout.
func awaitName(t *testing.T, ch <-chan arrival, name string, timeout time.Duration) (time.Time, bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case a := <-ch:
			if a.name == name {
				return a.at, true
			}
		case <-deadline.C:
			return time.Time{}, false
		case <-t.Context().Done():
			return time.Time{}, false
		}
	}
}

func namespaceOnBoth(t *testing.T, a, b kubernetes.Interface) string {
	t.Helper()
	ctx := t.Context()
	ns, err := a.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "two-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitFor(ctx, wait, "the namespace seen through the second apiserver", func(ctx context.Context) (bool, error) {
		_, err := b.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{ResourceVersion: "0"})
		return err == nil, client404(err)
	}); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func create(t *testing.T, cs kubernetes.Interface, ns, name string) time.Time {
	t.Helper()
	t0 := time.Now()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return t0
}

// A write through the first apiserver is seen through the second's watch
// only after its etcd link's lag, from 0.1 s to 10 s (the campaign's
// range), and at once without it: the second apiserver's watch cache is
// that far behind. At 10 s the second apiserver stays connected to etcd
// (its keepalive survives the lag) and serves the write.
func testLag(t *testing.T, cp *controlplane.ControlPlane) {
	as := cp.APIServers()
	a, b := clientset(t, as[0].Config), clientset(t, as[1].Config)
	ns := namespaceOnBoth(t, a, b)
	seen := watchConfigMaps(t, b, ns)

	t0 := create(t, a, ns, "fresh")
	at, ok := awaitName(t, seen, "fresh", wait)
	if !ok {
		t.Fatal("the second apiserver's watch never saw a write through the first")
	}
	fresh := at.Sub(t0)
	t.Logf("no lag: seen after %s", fresh)

	for _, lag := range []time.Duration{100 * time.Millisecond, 2 * time.Second, 10 * time.Second} {
		as[1].EtcdLink.SetLag(lag)
		name := fmt.Sprintf("lag-%d", lag.Milliseconds())
		t0 := create(t, a, ns, name)
		at, ok := awaitName(t, seen, name, lag+wait)
		if !ok {
			t.Fatalf("lag %s: the write never arrived through the second apiserver", lag)
		}
		got := at.Sub(t0)
		t.Logf("lag %s: seen after %s", lag, got)
		if got < lag {
			t.Errorf("lag %s: seen after %s, sooner than the lag", lag, got)
		}
		// The first apiserver is not behind: its cache has it already.
		if _, err := a.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{ResourceVersion: "0"}); err != nil {
			t.Errorf("lag %s: the first apiserver's cache lacks the write: %v", lag, err)
		}
	}
	as[1].EtcdLink.SetLag(0)
	t0 = create(t, a, ns, "healed")
	at, ok = awaitName(t, seen, "healed", wait)
	if !ok {
		t.Fatal("after the lag was removed the write never arrived")
	}
	if got := at.Sub(t0); got >= 2*time.Second {
		t.Errorf("without lag a write took %s to arrive (fresh: %s)", got, fresh)
	}
}

// A partitioned second apiserver serves neither new writes in its cache nor
// quorum reads; healed, it catches up. The first serves throughout.
func testPartition(t *testing.T, cp *controlplane.ControlPlane) {
	as := cp.APIServers()
	a, b := clientset(t, as[0].Config), clientset(t, as[1].Config)
	ns := namespaceOnBoth(t, a, b)
	seen := watchConfigMaps(t, b, ns)

	as[1].EtcdLink.Partition(true)
	create(t, a, ns, "cut")
	if _, ok := awaitName(t, seen, "cut", 3*time.Second); ok {
		t.Fatal("a partitioned apiserver's watch delivered a write made after the partition")
	}
	if _, err := b.CoreV1().ConfigMaps(ns).Get(t.Context(), "cut", metav1.GetOptions{ResourceVersion: "0"}); !apierrors.IsNotFound(err) {
		t.Errorf("a partitioned apiserver's cache: %v, want NotFound", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	_, err := b.CoreV1().ConfigMaps(ns).Get(ctx, "cut", metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Error("a partitioned apiserver answered a quorum read")
	}
	if _, err := a.CoreV1().ConfigMaps(ns).Get(t.Context(), "cut", metav1.GetOptions{}); err != nil {
		t.Errorf("the first apiserver, not partitioned: %v", err)
	}

	as[1].EtcdLink.Partition(false)
	if err := controlplane.WaitFor(t.Context(), 2*wait, "the healed apiserver to serve the write", func(ctx context.Context) (bool, error) {
		_, err := b.CoreV1().ConfigMaps(ns).Get(ctx, "cut", metav1.GetOptions{ResourceVersion: "0"})
		return err == nil, client404(err)
	}); err != nil {
		t.Fatal(err)
	}
}

// A front fails clients over between apiservers: Route resets established
// connections and new ones reach the other apiserver; a killed apiserver
// fails requests until the front routes away from it, and comes back on
// Restart.
func testFailover(t *testing.T, cp *controlplane.ControlPlane) {
	as := cp.APIServers()
	front, err := cp.NewFront(as[1])
	if err != nil {
		t.Fatal(err)
	}
	c := clientset(t, front.Config)
	ctx := t.Context()
	if _, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("through the front to the second apiserver: %v", err)
	}
	if err := as[1].Kill(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = c.CoreV1().Namespaces().Get(short, "default", metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Fatal("a request through the front reached a killed apiserver")
	}
	if _, err := front.Route(as[0]); err != nil {
		t.Fatal(err)
	}
	if front.To() != as[0] {
		t.Fatal("To does not report the new route")
	}
	if err := controlplane.WaitFor(ctx, wait, "requests through the front after failover", func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := as[0].Kill(); err != controlplane.ErrFirst {
		t.Errorf("Kill of the first apiserver: %v, want ErrFirst", err)
	}
	if err := as[1].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := front.Route(as[1]); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitFor(ctx, wait, "requests through the front to the restarted apiserver", func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
}
