package controller_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/lifecycle"
)

// Bad input is refused in the Synced condition with a constant reason and a
// message that says what to do; nothing is created, and nothing that
// belongs to someone else is touched.
func TestActionableConditions(t *testing.T) {
	w := start(t, controller.Options{})
	cases := map[string]struct {
		setup      func(ns string) *v1alpha1.Role
		wantReason string
		wantInMsg  string
	}{
		"Server missing": {
			setup: func(ns string) *v1alpha1.Role {
				r := role(ns, "r", pgtarget.RandomName("missing_"))
				r.Spec.ServerRef.Name = "nope"
				return r
			},
			wantReason: lifecycle.ReasonParentNotFound, wantInMsg: "create it or fix the reference",
		},
		"credential Secret missing": {
			setup: func(ns string) *v1alpha1.Role {
				w.create(&v1alpha1.Server{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nosecret"},
					Spec:       v1alpha1.ServerSpec{Host: w.pg.Host, Port: int32(w.pg.Port), SSLMode: v1alpha1.SSLModeDisable, CredentialsSecretRef: v1alpha1.CredentialsSecretReference{Name: "absent"}},
				})
				r := role(ns, "r", pgtarget.RandomName("nosecret_"))
				r.Spec.ServerRef.Name = "nosecret"
				return r
			},
			wantReason: controller.ReasonSecretMissing, wantInMsg: `credential Secret "absent" does not exist`,
		},
		"role name owned by someone else": {
			setup: func(ns string) *v1alpha1.Role {
				w.serverIn(ns)
				name := pgtarget.RandomName("theirs_")
				if _, err := w.admin.Exec(t.Context(), "CREATE ROLE "+name+"; COMMENT ON ROLE "+name+" IS 'not finale'"); err != nil {
					t.Fatal(err)
				}
				return role(ns, "r", name)
			},
			wantReason: string(catalog.ReasonNotOwned), wantInMsg: "choose another name",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ns := w.namespace()
			r := tc.setup(ns)
			w.create(r)
			w.waitCondition(r, lifecycle.ConditionSynced, metav1.ConditionFalse, tc.wantReason)
			c := meta.FindStatusCondition(r.Status.Conditions, lifecycle.ConditionSynced)
			if !strings.Contains(c.Message, tc.wantInMsg) {
				t.Errorf("Synced message %q does not say %q", c.Message, tc.wantInMsg)
			}
			if ready := meta.FindStatusCondition(r.Status.Conditions, lifecycle.ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse {
				t.Errorf("Ready = %+v, want False", ready)
			}
			if tag, ok := w.roleTag(r.Spec.RoleName); ok && strings.HasPrefix(tag, "finale:") {
				t.Errorf("role %s was created or adopted (tag %q)", r.Spec.RoleName, tag)
			}
			if r.Status.ObservedGeneration != r.Generation {
				t.Errorf("observedGeneration %d, generation %d", r.Status.ObservedGeneration, r.Generation)
			}
		})
	}
}
