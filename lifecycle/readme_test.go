package lifecycle_test

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/lifecycle"
)

// The wiring of one kind with every guarantee, as the README shows it (the
// README's snippet is this function's body between the markers:
// TestReadmeSnippet keeps the two the same, TestWiringSize its size).
// Widget is the managed kind, a ConfigMap its connection object ("parent")
// naming a credential Secret; the adapter also implements ConnectParent.
func Example_wiring() {
	wire := func(ctx context.Context, mgr ctrl.Manager, adapter lifecycle.Adapter[*Widget, string, *Conn], dial func(context.Context, string) (*Conn, error)) error {
		// README:begin
		// G1: every call through a pool of Dial's clients, bounded, a broken client evicted;
		// a stuck deletion evented and in CleanupBlocked. G2: a record before every create,
		// the parent and its Secret held while Widgets need them, a sweeper for what escapes.
		_, err := lifecycle.Setup(ctx, mgr, lifecycle.Kind[*Widget, *corev1.ConfigMap, string, *Conn]{
			Adapter:    adapter, // the service's verbs (and ConnectParent, Authentication: the sweeper's)
			Dial:       dial,
			ParentName: func(w *Widget) string { return w.Spec.Parent },
			SecretName: func(p *corev1.ConfigMap) string { return p.Data["secret"] },
		})
		return err
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
