package lifecycle

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

type policyKind string

type statusOf struct {
	Conditions         []metav1.Condition
	ObservedGeneration int64
}

type stringPolicy struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Spec   struct{ DeletionPolicy string }
	Status statusOf
}

type pointerPolicy struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Spec   struct{ DeletionPolicy *string }
	Status statusOf
}

type typedPolicy struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Spec   struct{ DeletionPolicy *policyKind }
	Status statusOf
}

type intPolicy struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Spec   struct{ DeletionPolicy int }
	Status statusOf
}

type noPolicy struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Spec   struct{}
	Status statusOf
}

func (o *stringPolicy) DeepCopyObject() runtime.Object  { c := *o; return &c }
func (o *pointerPolicy) DeepCopyObject() runtime.Object { c := *o; return &c }
func (o *typedPolicy) DeepCopyObject() runtime.Object   { c := *o; return &c }
func (o *intPolicy) DeepCopyObject() runtime.Object     { c := *o; return &c }
func (o *noPolicy) DeepCopyObject() runtime.Object      { c := *o; return &c }

// TestPolicyShapes: every shape a kubebuilder project gives DeletionPolicy
// is read (a *string Retain was once ignored and the resource deleted);
// one that cannot hold a policy is refused at construction.
func TestPolicyShapes(t *testing.T) {
	retain, kind := "Retain", policyKind("Retain")
	empty := ""
	sp := &stringPolicy{}
	sp.Spec.DeletionPolicy = "Retain"
	pp := &pointerPolicy{}
	pp.Spec.DeletionPolicy = &retain
	ppEmpty := &pointerPolicy{}
	ppEmpty.Spec.DeletionPolicy = &empty
	tp := &typedPolicy{}
	tp.Spec.DeletionPolicy = &kind
	for name, tc := range map[string]struct {
		obj  interface{ DeepCopyObject() runtime.Object }
		want DeletionPolicy
	}{
		"string":                   {obj: sp, want: PolicyRetain},
		"*string":                  {obj: pp, want: PolicyRetain},
		"*string nil":              {obj: &pointerPolicy{}, want: PolicyDelete},
		"*string empty":            {obj: ppEmpty, want: PolicyDelete},
		"pointer to a string type": {obj: tp, want: PolicyRetain},
		"no field":                 {obj: &noPolicy{}, want: PolicyDelete},
	} {
		t.Run(name, func(t *testing.T) {
			f, err := fieldsOf(tc.obj.(interface {
				runtime.Object
				metav1.Object
			}))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, policyOf(f, PolicyDelete)); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := fieldsOf(&intPolicy{}); err == nil || !strings.Contains(err.Error(), "DeletionPolicy") {
		t.Errorf("an int DeletionPolicy = %v, want refused", err)
	}
}

// A write that made no new version (an empty patch after a conflict)
// supersedes nothing: remembering its version would skip every later
// reconcile of an object no watch event brings again (found by the
// stale-apiserver campaign, seed 4).
func TestSupersedeOnlyNewVersions(t *testing.T) {
	r := &Reconciler[*stringPolicy, string, int]{}
	obj := &stringPolicy{}
	obj.SetUID("u")
	obj.SetResourceVersion("7")
	r.supersede(obj, "7")
	if r.skipStale(obj) {
		t.Fatal("a version no write replaced is skipped")
	}
	obj.SetResourceVersion("8")
	r.supersede(obj, "7")
	obj.SetResourceVersion("7")
	if !r.skipStale(obj) {
		t.Fatal("a version a write replaced is not skipped")
	}
}
