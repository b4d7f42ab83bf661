package lifecycle_test

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/sweep"
	"github.com/finale-dev/finale/watchdog"
)

// The wiring of one kind with every guarantee, as the README shows it (the
// README's snippet is this function's body between the markers, and
// TestReadmeSnippet keeps the two the same). Widget is the managed kind, a
// ConfigMap its connection object ("parent") naming a credential Secret.
func Example_wiring() {
	wire := func(mgr ctrl.Manager, adapter lifecycle.Adapter[*Widget, string, *Conn], pool *clientpool.Pool[string, *Conn]) error {
		// README:begin
		ctx, ns := context.Background(), os.Getenv(ledger.NamespaceEnv) // the operator's namespace
		rw := ledger.ReadWriter{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient()}
		store, err := ledger.NewConfigMapStore(rw, ns)
		if err != nil {
			return err
		}
		key, err := ledger.LoadKey(ctx, rw, ns, "") // created on first start
		if err != nil {
			return err
		}
		records, err := ledger.New(store, ledger.Options{Key: key}) // G2: record before create
		if err != nil {
			return err
		}
		parents, err := hold.New(hold.Config{ // G2: parent and Secret held
			Parent: &corev1.ConfigMap{}, Scheme: mgr.GetScheme(),
			SecretName: func(p client.Object) string { return p.(*corev1.ConfigMap).Data["secret"] },
			Dependents: []hold.Dependent{{Object: &Widget{}, CleanupFinalizer: "example.com/cleanup",
				ParentName: func(o client.Object) string { return o.(*Widget).Spec.Parent }}},
		})
		if err != nil {
			return err
		}
		r, err := lifecycle.New(mgr.GetClient(), func() *Widget { return &Widget{} }, adapter, pool, lifecycle.Options{
			Finalizer: "example.com/cleanup", Scheme: mgr.GetScheme(), APIReader: mgr.GetAPIReader(),
			Ledger: records, Hold: parents,
			Watchdog: watchdog.New(watchdog.Options{Scheme: mgr.GetScheme()}), // G1: stuck deletions visible
		})
		if err != nil {
			return err
		}
		if err := r.SetupWithManager(mgr, lifecycle.SetupOptions{}); err != nil { // the kind, its parent, the Secret
			return err
		}
		targets, err := r.SweepTargets(nil) // the record's own parent only; no admin-designated ones
		if err != nil {
			return err
		}
		sweeper, err := sweep.New(sweep.Options{Ledger: records, Owners: mgr.GetCache(), Live: mgr.GetAPIReader(),
			Targets: sweep.ByKind{"Widget": targets}})
		if err != nil {
			return err
		}
		return mgr.Add(sweeper) // runs on the leader only
		// README:end
	}
	_ = wire
}

// Conn is the client type of the example's service.
type Conn struct{}

// TestReadmeSnippet keeps the README's wiring snippet what Example_wiring
// compiles.
func TestReadmeSnippet(t *testing.T) {
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	body := between(string(src), "// README:begin\n", "\t\t// README:end")
	snippet := between(string(readme), "<!-- wiring: lifecycle/readme_test.go Example_wiring -->\n```go\n", "```")
	if body == "" || snippet == "" {
		t.Fatalf("markers not found: example %d bytes, README snippet %d bytes", len(body), len(snippet))
	}
	if normal(body) != normal(snippet) {
		t.Errorf("README's snippet differs from Example_wiring; copy the example's body between the markers into README.md.\nexample:\n%s\nREADME:\n%s", normal(body), normal(snippet))
	}
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	out, _, ok := strings.Cut(rest, to)
	if !ok {
		return ""
	}
	return out
}

// normal strips each line's indentation, so the README's snippet may start
// at the left margin.
func normal(s string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		out = append(out, strings.TrimSpace(l))
	}
	return strings.Join(out, "\n")
}
