package controller_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/sweep"
)

// The attack: the admin vouches for the path to
// PostgreSQL on one port of 127.0.0.1 (--sweep-trusted-hosts), and a
// splicing proxy listens on another port of the same host, moving each
// session to a physical copy after its first proof. A Server pointing at
// the proxy is not trusted: the sweeper asks nothing through it, every
// record stays, every role stays in the original, and the Server says why
// (SweepVerified False). When the trust covered the host alone, the
// sweeper used the proxy, the deletes landed in the copy, and the records
// were removed while the roles lived on. A designated Server on the
// trusted host and port then sweeps them.
func TestTrustedHostIsTrustedOnItsPortOnly(t *testing.T) {
	pg := ownServer(t)
	opts := sweepFast
	opts.SweepTrustedHosts = []string{pg.Addr()}
	w := start(t, opts)
	st := w.strand(pg, 2)
	cp, err := pg.Copy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	s := mover(t, pg, cp, false)
	if host := strings.Split(s.Addr(), ":")[0]; host != pg.Host || s.Addr() == pg.Addr() {
		t.Fatalf("the proxy listens on %s, want another port of %s", s.Addr(), pg.Host)
	}

	// The admin's Server through the proxy, there before the first pass.
	w.serverOn(w.recNS, "spliced", pg, s.Addr(), v1alpha1.SSLModeDisable)
	w2 := w.restart(opts)
	reasons, notes := w2.decided(st.uids)
	for i, r := range reasons {
		if r != sweep.ReasonUnverified || !strings.Contains(notes[i], "Server "+w2.recNS+"/spliced") {
			t.Errorf("sweep Event %s, want only %s naming the proxied Server: %q", r, sweep.ReasonUnverified, notes[i])
		}
	}
	w2.kept(st, pg)
	w2.waitCondition(&v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: w2.recNS, Name: "spliced"}}, controller.ConditionSweepVerified, metav1.ConditionFalse, controller.ReasonSweepUnverified)
	if n := s.Switched(); n > 0 {
		t.Errorf("the sweeper acted through the proxy on another port of a trusted host: %d sessions moved to the copy", n)
	}

	// The trusted host and port itself: swept, in the original.
	w2.serverOn(w2.recNS, "direct", pg, pg.Addr(), v1alpha1.SSLModeDisable)
	w2.waitCondition(&v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: w2.recNS, Name: "direct"}}, controller.ConditionSweepVerified, metav1.ConditionTrue, controller.ReasonAuthenticated)
	w2.swept(st, pg)
	if n := s.Switched(); n > 0 {
		t.Errorf("%d sessions moved to the copy", n)
	}
}
