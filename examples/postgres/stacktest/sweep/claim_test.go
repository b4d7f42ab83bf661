package sweep_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

// earlierNamespace stands for the UID the users' namespace had when the
// record was written: the namespace was deleted and created again under
// its name since, so the claim needs an admin's approval.
const earlierNamespace = types.UID("0e000000-0000-4000-8000-0000000000e1")

// claimed is a record written in an earlier namespace of the users'
// namespace's name, its owner gone, and a Widget of the same name that
// claims it: what whoever creates the namespace again can make.
type claimed struct {
	e        *env
	old      ledger.Owner
	role     string
	claimant *unstructured.Unstructured
}

// newClaimed makes it, the record naming the namespace UID nsUID gives.
func newClaimed(t *testing.T, nsUID func(e *env) types.UID) *claimed {
	t.Helper()
	e := newEnv(t)
	old := newWidget(t, e.c, e.users, "claimed")
	role := e.createWith(t, ledger.Plan{Owner: old, NamespaceUID: nsUID(e)}, e.a)
	e.deleteOwner(t, old)
	u := widget(e.users, "claimed")
	u.SetAnnotations(map[string]string{ledger.AnnotationUID: string(old.UID)})
	if err := e.c.Create(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(settled)
	return &claimed{e: e, old: old, role: role, claimant: u}
}

func (c *claimed) pass(t *testing.T, s *sweep.Sweeper, want sweep.Report, when string) {
	t.Helper()
	rep, err := s.Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("%s: report (-want +got):\n%s", when, diff)
	}
}

func (c *claimed) kept(t *testing.T, when string) {
	t.Helper()
	if !c.e.roleExists(t, c.role) || !c.e.hasRecord(t, c.old) {
		t.Fatalf("%s: the predecessor's role or record went while the claim's grace runs", when)
	}
}

// recordNote reads the sweeper's Note as the stored record holds it.
func (c *claimed) recordNote(t *testing.T) ledger.Note {
	t.Helper()
	r, err := c.e.l.Get(t.Context(), c.old.UID)
	if err != nil {
		t.Fatal(err)
	}
	return r.Note
}

// claimantEvents are the Events of reason sent to the claimant (the
// record's own Events are regarding its ConfigMap).
func (c *claimed) claimantEvents(reason string) []event {
	var out []event
	for _, ev := range c.e.events.byReason(reason) {
		if ev.Regarding == c.claimant.GetName() {
			out = append(out, ev)
		}
	}
	return out
}

// An unapproved claim bounds the sweeper, whatever the claimant writes.
// A Widget claims the record of its predecessor from a namespace created
// again since (the record names another namespace UID) and nobody
// approves: the sweeper keeps the predecessor's role and record for
// sweep.DefaultClaimGrace from its own first sight of the claim, says so
// on the record (Note.Until) and to the claimant (CleanupClaimPending with
// the deadline), and then sweeps them by exact identity and tells the
// claimant (CleanupClaimExpired). The claimant's own annotations, which
// mimic the sweeper's note or an admin's approval, neither shorten nor
// extend the grace, and a restarted sweeper keeps the first deadline.
// Before, the claim held the sweeper for as long as it stood.
func TestUnapprovedClaimIsKeptForItsGraceOnly(t *testing.T) {
	for name, tenant := range map[string]func(u *unstructured.Unstructured) map[string]string{
		"nothing more": nil,
		"a note saying the claim is old": func(*unstructured.Unstructured) map[string]string {
			return map[string]string{ledger.AnnotationSweepState: string(sweep.Adoptable), ledger.AnnotationSweepClass: sweep.ClassNeedsApproval,
				ledger.AnnotationSweepSince: t0.Add(-30 * 24 * time.Hour).Format(time.RFC3339), ledger.AnnotationSweepUntil: t0.Add(-time.Hour).Format(time.RFC3339)}
		},
		"a note saying the claim is kept for a year": func(*unstructured.Unstructured) map[string]string {
			return map[string]string{ledger.AnnotationSweepSince: t0.Add(time.Hour).Format(time.RFC3339), ledger.AnnotationSweepUntil: t0.Add(365 * 24 * time.Hour).Format(time.RFC3339)}
		},
		"an approval of itself": func(u *unstructured.Unstructured) map[string]string {
			return map[string]string{ledger.AnnotationApproval: string(u.GetUID())}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := newClaimed(t, func(*env) types.UID { return earlierNamespace })
			e := c.e
			if tenant != nil {
				a := c.claimant.GetAnnotations()
				for k, v := range tenant(c.claimant) {
					a[k] = v
				}
				c.claimant.SetAnnotations(a)
				if err := e.c.Update(t.Context(), c.claimant); err != nil {
					t.Fatal(err)
				}
			}
			firstSight := e.clock.Now()
			deadline := firstSight.Add(sweep.DefaultClaimGrace)

			s := e.sweeper(t, e.c, e.a)
			c.pass(t, s, sweep.Report{Adoptable: 1}, "first sight of the claim")
			c.kept(t, "first sight")
			want := ledger.Note{State: string(sweep.Adoptable), Class: sweep.ClassNeedsApproval, Since: firstSight, Until: deadline}
			if diff := cmp.Diff(want, c.recordNote(t)); diff != "" {
				t.Errorf("the record's note (-want +got):\n%s", diff)
			}
			pending := c.claimantEvents(sweep.ReasonClaimPending)
			if len(pending) != 1 || pending[0].Type != corev1.EventTypeWarning || !strings.Contains(pending[0].Note, deadline.Format(time.RFC3339)) {
				t.Errorf("claimant's %s events = %+v, want one Warning naming the deadline %s", sweep.ReasonClaimPending, pending, deadline.Format(time.RFC3339))
			}
			if evs := e.events.byReason(sweep.ReasonAdoptable); len(evs) != 1 || !strings.Contains(evs[0].Note, "kubectl -n "+e.store.Namespace()+" annotate configmap "+ledger.ConfigMapName(c.old.UID)) {
				t.Errorf("record's %s events = %+v, want one saying how an admin approves", sweep.ReasonAdoptable, evs)
			}

			e.clock.Step(sweep.DefaultClaimGrace - time.Minute)
			c.pass(t, s, sweep.Report{Adoptable: 1}, "a minute before the deadline")
			c.kept(t, "a minute before the deadline")
			if n := len(c.claimantEvents(sweep.ReasonClaimPending)); n != 1 {
				t.Errorf("claimant told of the deadline %d times, want once", n)
			}

			// A new sweeper (a restart, a new leader) keeps the deadline
			// the record's note holds; it does not start a grace afresh.
			s = e.sweeper(t, e.c, e.a)
			c.pass(t, s, sweep.Report{Adoptable: 1}, "a restarted sweeper before the deadline")
			c.kept(t, "a restarted sweeper before the deadline")
			e.clock.Step(2 * time.Minute)
			c.pass(t, s, sweep.Report{Deleted: 1, Removed: 1}, "past the deadline")
			if e.roleExists(t, c.role) || e.hasRecord(t, c.old) {
				t.Error("past the deadline the predecessor's role or record stays")
			}
			expired := c.claimantEvents(sweep.ReasonClaimExpired)
			if len(expired) != 1 || !strings.Contains(expired[0].Note, string(c.old.UID)) || !strings.Contains(expired[0].Note, deadline.Format(time.RFC3339)) {
				t.Errorf("claimant's %s events = %+v, want one naming the claimed uid and the deadline", sweep.ReasonClaimExpired, expired)
			}
		})
	}
}

// A claim that may pass keeps the record while it stands, past any grace:
// an admin approved that one object on the record, or the claimant lives
// in the very namespace the record was written in (a restore in place,
// where adoption needs nobody). Only claims that wait for an admin are
// bounded.
func TestApprovedClaimIsKeptWhileItStands(t *testing.T) {
	for name, tc := range map[string]struct {
		sameNamespace, approve bool
	}{
		"an admin approved it":   {approve: true},
		"the record's namespace": {sameNamespace: true},
	} {
		t.Run(name, func(t *testing.T) {
			c := newClaimed(t, func(e *env) types.UID {
				if !tc.sameNamespace {
					return earlierNamespace
				}
				var ns corev1.Namespace
				if err := e.c.Get(t.Context(), client.ObjectKey{Name: e.users}, &ns); err != nil {
					t.Fatal(err)
				}
				return ns.UID
			})
			e := c.e
			if tc.approve {
				var cm corev1.ConfigMap
				if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: e.store.Namespace(), Name: ledger.ConfigMapName(c.old.UID)}, &cm); err != nil {
					t.Fatal(err)
				}
				cm.Annotations = map[string]string{ledger.AnnotationApproval: string(c.claimant.GetUID())}
				if err := e.c.Update(t.Context(), &cm); err != nil {
					t.Fatal(err)
				}
			}
			s := e.sweeper(t, e.c, e.a)
			c.pass(t, s, sweep.Report{Adoptable: 1}, "first sight of the claim")
			e.clock.Step(2 * sweep.DefaultClaimGrace)
			c.pass(t, s, sweep.Report{Adoptable: 1}, "twice the grace later")
			c.kept(t, "twice the grace later")
			if n := c.recordNote(t); n.Class != "" || !n.Until.IsZero() {
				t.Errorf("note %+v on a claim that may pass, want no class and no deadline", n)
			}
			for _, reason := range []string{sweep.ReasonClaimPending, sweep.ReasonClaimExpired} {
				if evs := c.claimantEvents(reason); len(evs) != 0 {
					t.Errorf("claimant got %s events %+v for a claim that may pass", reason, evs)
				}
			}
		})
	}
}
