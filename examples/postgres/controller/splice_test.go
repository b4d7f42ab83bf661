package controller_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/internal/pgsplice"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/sweep"
)

// isProof matches the deployment proof's statement (catalog.Prove): the
// one that reads the sentinel and hashes inside PostgreSQL.
func isProof(sql string) bool {
	return strings.Contains(sql, controller.Sentinel) && strings.Contains(sql, "sha256(")
}

// mover is a splicing proxy in front of pg that passes every session to
// pg until its first proof is answered, then moves the whole session to
// cp; with tls it terminates TLS with a certificate of its own, as
// sslMode require accepts.
func mover(t *testing.T, pg, cp *pgserver.Server, tls bool) *pgsplice.Splicer {
	t.Helper()
	s, err := pgsplice.New(pgsplice.Options{Primary: pg.Addr(), Other: cp.DSN(), TLS: tls, SwitchAfter: isProof})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// moverMoves checks, without the operator, that the proxy does what the
// attack needs: a session's first proof-like statement is answered by pg,
// everything after it by the copy.
func moverMoves(t *testing.T, s *pgsplice.Splicer, pg, cp *pgserver.Server, sslmode string) {
	t.Helper()
	dsn := strings.Replace(pg.DSNVia(s.Addr(), "postgres"), "sslmode=disable", "sslmode="+sslmode, 1)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	port := func() int {
		var p int
		if err := conn.QueryRow(t.Context(), "SELECT inet_server_port()").Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got := port(); got != pg.Port {
		t.Fatalf("before the proof the session reaches port %d, want the original's %d", got, pg.Port)
	}
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM "+controller.Sentinel+" WHERE $1 <> sha256('x')::text", "y").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if got := port(); got != cp.Port {
		t.Fatalf("after the proof the session reaches port %d, want the copy's %d: the proxy does not move sessions", got, cp.Port)
	}
}

// sweepEvents are the sweeper's Event reasons about records.
var sweepEvents = []string{sweep.ReasonSwept, sweep.ReasonUnreachable, sweep.ReasonUnverified}

// decided waits until the sweeper has said something about every record
// of uids (or removed it) and returns its Events' reasons and notes.
func (w *world) decided(uids []string) (reasons, notes []string) {
	w.t.Helper()
	err := controlplane.WaitFor(w.t.Context(), wait, "the sweeper decides every record", func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := w.c.List(ctx, &evs, client.InNamespace(w.recNS)); err != nil {
			return false, err
		}
		reasons, notes = nil, nil
		seen := map[string]bool{}
		for _, ev := range evs.Items {
			for _, r := range sweepEvents {
				if ev.Reason == r {
					seen[ev.Regarding.Name] = true
					reasons, notes = append(reasons, ev.Reason), append(notes, ev.Note)
				}
			}
		}
		for _, u := range uids {
			if !seen[ledger.ConfigMapName(typesUID(u))] && w.record(u) != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return reasons, notes
}

// The splicing attack: a proxy in the path of a designated
// Server passes each session to the original deployment until its first
// proof is answered, then moves the whole session to a physical copy
// taken after the sentinel was enrolled (the same identity, the same
// sentinel, the same roles). The deletes land on the copy, and the proof
// after them, answered by the copy, says nothing remains. The older
// splice, which diverts only the DROPs, is tried too. With sslMode
// disable, and with require (the proxy terminates TLS with a certificate
// nobody checks), nothing may be reported deleted, every record must stay,
// every role must still be in the original, and the Server must say why
// (SweepVerified False).
func TestSessionMovedToACopyConfirmsNothing(t *testing.T) {
	for _, c := range []struct{ name, proxy string }{{"moved", "move"}, {"dropsDiverted", "divert"}} {
		for _, ssl := range []v1alpha1.SSLMode{v1alpha1.SSLModeDisable, v1alpha1.SSLModeRequire} {
			t.Run(c.name+"/"+string(ssl), func(t *testing.T) {
				pg := ownServer(t)
				w := start(t, sweepFast)
				st := w.strand(pg, 2)
				cp, err := pg.Copy(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = cp.Stop() })
				var s *pgsplice.Splicer
				moved := 0 // by moverMoves, not by the operator
				if c.proxy == "move" {
					s = mover(t, pg, cp, ssl == v1alpha1.SSLModeRequire)
					moverMoves(t, s, pg, cp, string(ssl))
					moved = 1
				} else {
					s, err = pgsplice.New(pgsplice.Options{
						Primary: pg.Addr(), Other: cp.DSN(), TLS: ssl == v1alpha1.SSLModeRequire,
						Divert: func(sql string) bool { return strings.HasPrefix(sql, "DROP ") },
					})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = s.Close() })
				}

				// The admin's Server, there before the sweeper's first pass.
				w.serverOn(w.recNS, "sweeper", pg, s.Addr(), ssl)
				w2 := w.restart(sweepFast)
				reasons, notes := w2.decided(st.uids)
				for i, r := range reasons {
					if r != sweep.ReasonUnverified {
						t.Errorf("sweep Event %s, want only %s: %q", r, sweep.ReasonUnverified, notes[i])
					}
					if !strings.Contains(notes[i], "Server "+w2.recNS+"/sweeper") {
						t.Errorf("the Event does not name the Server it would not use: %q", notes[i])
					}
				}
				w2.kept(st, pg)
				srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: w2.recNS, Name: "sweeper"}}
				w2.waitCondition(srv, controller.ConditionSweepVerified, metav1.ConditionFalse, controller.ReasonSweepUnverified)
				if s.Switched() > moved || s.Diverted() > 0 {
					t.Errorf("the sweeper acted through the unauthenticated Server: %d sessions moved, %d statements diverted", s.Switched()-moved, s.Diverted())
				}
			})
		}
	}
}

// ownTLSServer is ownServer serving TLS with a certificate for 127.0.0.1
// from a CA of the test's own, kept outside the data directory (so a Copy
// has no key).
func ownTLSServer(t *testing.T) (*pgserver.Server, *pgserver.CA) {
	t.Helper()
	ca, err := pgserver.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pg, err := pgserver.Start(t.Context(), pgserver.Options{TLS: &cert})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	return pg, ca
}

// serverOnTLS is serverOn with the CA certificates in the credential
// Secret (credentialsSecretRef.caKey).
func (w *world) serverOnTLS(ns, name string, pg *pgserver.Server, addr string, ssl v1alpha1.SSLMode, ca *pgserver.CA) {
	w.t.Helper()
	w.serverOn(ns, name, pg, addr, ssl)
	sec := &corev1.Secret{}
	if err := w.c.Get(w.t.Context(), client.ObjectKey{Namespace: ns, Name: name + "-admin"}, sec); err != nil {
		w.t.Fatal(err)
	}
	sec.Data["ca.crt"] = ca.CertPEM
	if err := w.c.Update(w.t.Context(), sec); err != nil {
		w.t.Fatal(err)
	}
	// The operator writes the Server's status meanwhile: retry conflicts.
	w.editServer(ns, name, func(srv *v1alpha1.Server) { srv.Spec.CredentialsSecretRef.CAKey = "ca.crt" })
}

// With a connection that authenticates the server (sslMode verify-full
// against the CA the Server pins), a splicing proxy cannot stand in the
// path: one terminating TLS with a certificate of its own, or with a
// certificate the same CA issued for another host (a staging copy's, say),
// fails the handshake, so the sweeper reaches nothing, deletes nothing and
// keeps the records. verify-ca accepts that second certificate, and the
// proxy does move its sessions: a Server with verify-ca is never used.
// Once the admin's Server reaches the original with verify-full, the
// sweeper drops the roles there and removes the records, naming the
// Server.
func TestAuthenticatedSweepCannotBeSpliced(t *testing.T) {
	pg, ca := ownTLSServer(t)
	w := start(t, sweepFast)
	st := w.strand(pg, 2)
	cp, err := pg.Copy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	own := mover(t, pg, cp, true)
	staging, err := ca.Issue("staging.db.internal")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(staging.CertPEM, staging.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	sameCA, err := pgsplice.New(pgsplice.Options{Primary: pg.Addr(), Other: cp.DSN(), TLS: true, Certificate: &pair, SwitchAfter: isProof})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sameCA.Close() })
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	moverMoves(t, sameCA, pg, cp, "verify-ca&sslrootcert="+caFile)

	// The admin's Servers, there before the sweeper's first pass.
	w.serverOnTLS(w.recNS, "a-spliced", pg, own.Addr(), v1alpha1.SSLModeVerifyFull, ca)
	w.serverOnTLS(w.recNS, "b-staging", pg, sameCA.Addr(), v1alpha1.SSLModeVerifyFull, ca)
	w.serverOnTLS(w.recNS, "c-verify-ca", pg, sameCA.Addr(), v1alpha1.SSLModeVerifyCA, ca)
	w2 := w.restart(sweepFast)
	reasons, notes := w2.decided(st.uids)
	for i, r := range reasons {
		if r != sweep.ReasonUnreachable || !strings.Contains(notes[i], w2.recNS+"/a-spliced") {
			t.Errorf("sweep Event %s, want %s through a-spliced: %q", r, sweep.ReasonUnreachable, notes[i])
		}
	}
	for name, want := range map[string]metav1.ConditionStatus{"a-spliced": metav1.ConditionTrue, "b-staging": metav1.ConditionTrue, "c-verify-ca": metav1.ConditionFalse} {
		srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: w2.recNS, Name: name}}
		w2.waitCondition(srv, controller.ConditionSweepVerified, want, "")
	}
	// The verify-ca Server connects through the proxy (its sessions reach
	// the original until a proof); the verify-full ones cannot connect.
	w2.ready(&v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: w2.recNS, Name: "c-verify-ca"}})
	w2.waitCondition(&v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: w2.recNS, Name: "a-spliced"}}, v1alpha1.ConditionReady, metav1.ConditionFalse, controller.ReasonConnectFailed)
	w2.kept(st, pg)
	if own.Switched() > 0 || sameCA.Switched() > 1 { // 1: moverMoves's own session
		t.Errorf("sessions moved to the copy: %d and %d", own.Switched(), sameCA.Switched()-1)
	}

	// The admin's Server to the original, verify-full: swept.
	for _, name := range []string{"a-spliced", "b-staging", "c-verify-ca"} {
		srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: w2.recNS, Name: name}}
		if err := w2.c.Delete(t.Context(), srv); err != nil {
			t.Fatal(err)
		}
		w2.waitGone(srv)
	}
	w2.serverOnTLS(w2.recNS, "direct", pg, pg.Addr(), v1alpha1.SSLModeVerifyFull, ca)
	w2.waitCondition(&v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: w2.recNS, Name: "direct"}}, controller.ConditionSweepVerified, metav1.ConditionTrue, controller.ReasonAuthenticated)
	w2.swept(st, pg)
	for _, n := range w2.recordEvents(sweep.ReasonSwept, st.uids) {
		if !strings.Contains(n, "designated Server "+w2.recNS+"/direct") {
			t.Errorf("swept Event does not name the connection used: %q", n)
		}
	}
	for _, r := range st.roles {
		if !roleOn(t, cp, r) {
			t.Errorf("role %s dropped in the copy: the sweep went there", r)
		}
	}
}
