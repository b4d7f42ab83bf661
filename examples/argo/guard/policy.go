package guard

import (
	"context"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PolicyName names the MutatingAdmissionPolicy (and the default binding).
const PolicyName = "finale-argo-guard"

// Expressions of the policy. The match condition is the guard's own
// definition of a workflow Pod: an owner reference to an argoproj.io
// Workflow (what the release rule follows) and Argo's workflow label (what
// the guard command caches Pods by). Every Pod the guard watches and can
// release gets the finalizer, and no other Pod does: one it marked but
// never saw would stay Terminating, unreported.
const (
	matchWorkflowPod = "has(object.metadata.labels) && '" + LabelWorkflow + "' in object.metadata.labels && " +
		"has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, r.kind == 'Workflow' && r.apiVersion.startsWith('argoproj.io/'))"
	addFinalizer = `Object{metadata: Object.metadata{finalizers: ["` + Finalizer + `"]}}`
)

// Policy is the MutatingAdmissionPolicy (admissionregistration.k8s.io/v1,
// served by default since Kubernetes 1.36) that adds Finalizer to every
// workflow Pod in the request that creates it. The apply configuration
// merges into the Pod's finalizers (a set), keeping Argo's own.
// failurePolicy Fail: a Pod the policy cannot mutate is not created (Argo
// retries), rather than created unprotected.
func Policy() *admissionv1.MutatingAdmissionPolicy {
	return &admissionv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{
						Operations: []admissionv1.OperationType{admissionv1.Create},
						Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
					},
				}},
			},
			MatchConditions: []admissionv1.MatchCondition{{Name: "workflow-pod", Expression: matchWorkflowPod}},
			Mutations: []admissionv1.Mutation{{
				PatchType:          admissionv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: addFinalizer},
			}},
			FailurePolicy:      ptr.To(admissionv1.Fail),
			ReinvocationPolicy: admissionv1.IfNeededReinvocationPolicy,
		},
	}
}

// Binding binds Policy. name is the binding's name; namespaces, when not
// nil, limits it to the namespaces it selects (nil: every namespace, as
// the manifests install it).
func Binding(name string, namespaces *metav1.LabelSelector) *admissionv1.MutatingAdmissionPolicyBinding {
	b := &admissionv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: PolicyName},
	}
	if namespaces != nil {
		b.Spec.MatchResources = &admissionv1.MatchResources{NamespaceSelector: namespaces}
	}
	return b
}

// checkPolicy: the policy exists, adds Finalizer, fails closed, and at
// least one binding refers to it.
func checkPolicy(ctx context.Context, r client.Reader) error {
	var p admissionv1.MutatingAdmissionPolicy
	if err := r.Get(ctx, client.ObjectKey{Name: PolicyName}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("guard: MutatingAdmissionPolicy %s is not installed, so workflow Pods would be created without the guard's finalizer; install the guard's manifests (kubectl apply -k examples/argo/config/default)", PolicyName)
		}
		return fmt.Errorf("guard: read MutatingAdmissionPolicy %s: %w", PolicyName, err)
	}
	places := false
	for _, m := range p.Spec.Mutations {
		if m.ApplyConfiguration != nil && strings.Contains(m.ApplyConfiguration.Expression, `"`+Finalizer+`"`) {
			places = true
		}
	}
	if !places {
		return fmt.Errorf("guard: MutatingAdmissionPolicy %s does not add the finalizer %s; reinstall the guard's manifests", PolicyName, Finalizer)
	}
	if p.Spec.FailurePolicy != nil && *p.Spec.FailurePolicy != admissionv1.Fail {
		return fmt.Errorf("guard: MutatingAdmissionPolicy %s has failurePolicy %s; it must be Fail, or a Pod could be created unprotected", PolicyName, *p.Spec.FailurePolicy)
	}
	var bindings admissionv1.MutatingAdmissionPolicyBindingList
	if err := r.List(ctx, &bindings); err != nil {
		return fmt.Errorf("guard: list MutatingAdmissionPolicyBindings: %w", err)
	}
	for _, b := range bindings.Items {
		if b.Spec.PolicyName == PolicyName {
			return nil
		}
	}
	return fmt.Errorf("guard: no MutatingAdmissionPolicyBinding binds %s, so it adds nothing; install the guard's manifests", PolicyName)
}
