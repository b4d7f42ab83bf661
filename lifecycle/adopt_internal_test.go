package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

// A claim that needs an admin's approval says when the sweeper stops
// keeping what it claims, from the sweeper's own note on the record (never
// from the claimant), and how an admin approves a whole restored namespace
// at once when the record names the namespace's earlier UID.
func TestNeedsApprovalStatesTheDeadline(t *testing.T) {
	const from, claimant, earlier = types.UID("old-uid"), types.UID("new-uid"), types.UID("earlier-ns-uid")
	until := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := ledger.Plan{Owner: ledger.Owner{APIVersion: "v1", Kind: "Role", Namespace: "team-a", Name: "app", UID: claimant}}
	record := func(nsUID types.UID, n ledger.Note) *ledger.Record {
		return &ledger.Record{
			Owner:        ledger.Owner{APIVersion: "v1", Kind: "Role", Namespace: "team-a", Name: "app", UID: from},
			NamespaceUID: nsUID, Note: n, Source: &corev1.ObjectReference{Namespace: "finale-system", Name: ledger.ConfigMapName(from)},
		}
	}
	perObject := "kubectl -n finale-system annotate configmap finale-cleanup-old-uid " + ledger.AnnotationApproval + "=new-uid"
	wholeNamespace := "finale approve --records-namespace finale-system --namespace team-a --from-uid earlier-ns-uid"
	deadline := "Unless an admin approves by 2026-12-01T12:00:00Z"
	grace := fmt.Sprintf("(%s at defaults", sweep.DefaultClaimGrace)
	for name, tc := range map[string]struct {
		claimed       *ledger.Record
		want, wantNot []string
	}{
		"noted by the sweeper": {
			claimed: record(earlier, ledger.Note{State: string(sweep.Adoptable), Class: sweep.ClassNeedsApproval, Since: until.Add(-sweep.DefaultClaimGrace), Until: until}),
			want:    []string{perObject, wholeNamespace, deadline},
			wantNot: []string{grace},
		},
		"not yet seen by the sweeper": {
			claimed: record(earlier, ledger.Note{}),
			want:    []string{perObject, wholeNamespace, grace},
			wantNot: []string{deadline},
		},
		"a deadline-like note of another verdict": {
			claimed: record(earlier, ledger.Note{State: string(sweep.Unreachable), Class: "Transport", Until: until}),
			want:    []string{grace},
			wantNot: []string{deadline},
		},
		"a record that names no namespace": {
			claimed: record("", ledger.Note{}),
			want:    []string{perObject, grace},
			wantNot: []string{"finale approve"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			na := refusal(ledger.ErrNeedsApproval, from, tc.claimed, p)
			if na == nil {
				t.Fatal("no NeedsAction for ErrNeedsApproval")
			}
			if diff := cmp.Diff(ReasonAdoptionNeedsApproval, na.Reason); diff != "" {
				t.Errorf("reason (-want +got):\n%s", diff)
			}
			for _, w := range tc.want {
				if !strings.Contains(na.Action, w) {
					t.Errorf("action %q does not say %q", na.Action, w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(na.Action, w) {
					t.Errorf("action %q says %q", na.Action, w)
				}
			}
		})
	}
}
