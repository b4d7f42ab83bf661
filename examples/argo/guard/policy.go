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
//
// The guard is alive when its heartbeat Lease (the policy's parameter,
// HeartbeatName) was renewed within its duration before this request.
// Admission CEL on kube-apiserver 1.37 has no clock (no now(); checked on
// the real apiserver), and creationTimestamp is set only after admission;
// but the apiserver stamps the request's managedFields entry with its own
// time before it calls mutating admission, so that entry's time is the
// request time. Doubt keeps the finalizer: a request without a time is
// treated as fresh. No Lease (the guard never ran, or was uninstalled)
// matches no parameter, and the binding's parameterNotFoundAction Allow
// then adds nothing; a Lease without renewTime or duration is not fresh.
const (
	matchWorkflowPod = "has(object.metadata.labels) && '" + LabelWorkflow + "' in object.metadata.labels && " +
		"has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, r.kind == 'Workflow' && r.apiVersion.startsWith('argoproj.io/'))"
	varGuardAlive  = "guardAlive"
	exprGuardAlive = "params != null && has(params.spec) && has(params.spec.renewTime) && has(params.spec.leaseDurationSeconds) && " +
		"object.metadata.?managedFields.orValue([]).all(f, !has(f.time) || " +
		"timestamp(f.time) < timestamp(params.spec.renewTime) + duration(string(params.spec.leaseDurationSeconds) + 's'))"
	addFinalizer = `variables.` + varGuardAlive + ` ? Object{metadata: Object.metadata{finalizers: ["` + Finalizer + `"]}} : Object{}`
)

// HeartbeatKind is the policy's paramKind: the heartbeat is a Lease.
var HeartbeatKind = admissionv1.ParamKind{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}

// Policy is the MutatingAdmissionPolicy (admissionregistration.k8s.io/v1,
// served by default since Kubernetes 1.36) that adds Finalizer to every
// workflow Pod in the request that creates it, while the guard's heartbeat
// Lease is fresh. The apply configuration merges into the Pod's finalizers
// (a set), keeping Argo's own. failurePolicy Fail: a Pod the policy cannot
// evaluate is not created (Argo retries), rather than created unprotected.
func Policy() *admissionv1.MutatingAdmissionPolicy {
	return &admissionv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			ParamKind: ptr.To(HeartbeatKind),
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{
						Operations: []admissionv1.OperationType{admissionv1.Create},
						Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
					},
				}},
			},
			MatchConditions: []admissionv1.MatchCondition{{Name: "workflow-pod", Expression: matchWorkflowPod}},
			Variables:       []admissionv1.Variable{{Name: varGuardAlive, Expression: exprGuardAlive}},
			Mutations: []admissionv1.Mutation{{
				PatchType:          admissionv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: addFinalizer},
			}},
			FailurePolicy:      ptr.To(admissionv1.Fail),
			ReinvocationPolicy: admissionv1.IfNeededReinvocationPolicy,
		},
	}
}

// Binding binds Policy to the heartbeat Lease in heartbeatNamespace (the
// guard's namespace). name is the binding's name; namespaces, when not
// nil, limits it to the namespaces it selects (nil: every namespace, as
// the manifests install it).
func Binding(name string, namespaces *metav1.LabelSelector, heartbeatNamespace string) *admissionv1.MutatingAdmissionPolicyBinding {
	b := &admissionv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: PolicyName,
			ParamRef: &admissionv1.ParamRef{
				Name: HeartbeatName, Namespace: heartbeatNamespace,
				ParameterNotFoundAction: ptr.To(admissionv1.AllowAction),
			},
		},
	}
	if namespaces != nil {
		b.Spec.MatchResources = &admissionv1.MatchResources{NamespaceSelector: namespaces}
	}
	return b
}

// checkPolicy: the policy exists, adds Finalizer, reads the heartbeat,
// fails closed, and a binding refers to it with the heartbeat Lease in
// heartbeatNamespace as its parameter (otherwise it marks nothing while
// this guard runs, or marks for a Lease nobody renews).
func checkPolicy(ctx context.Context, r client.Reader, heartbeatNamespace string) error {
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
	if p.Spec.ParamKind == nil || *p.Spec.ParamKind != HeartbeatKind {
		return fmt.Errorf("guard: MutatingAdmissionPolicy %s does not read the guard's heartbeat (paramKind %s %s), so it would mark Pods while no guard runs; reinstall the guard's manifests", PolicyName, HeartbeatKind.APIVersion, HeartbeatKind.Kind)
	}
	if p.Spec.FailurePolicy != nil && *p.Spec.FailurePolicy != admissionv1.Fail {
		return fmt.Errorf("guard: MutatingAdmissionPolicy %s has failurePolicy %s; it must be Fail, or a Pod could be created unprotected", PolicyName, *p.Spec.FailurePolicy)
	}
	var bindings admissionv1.MutatingAdmissionPolicyBindingList
	if err := r.List(ctx, &bindings); err != nil {
		return fmt.Errorf("guard: list MutatingAdmissionPolicyBindings: %w", err)
	}
	bound := false
	for _, b := range bindings.Items {
		if b.Spec.PolicyName != PolicyName {
			continue
		}
		bound = true
		ref := b.Spec.ParamRef
		if ref != nil && ref.Name == HeartbeatName && ref.Namespace == heartbeatNamespace &&
			ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionv1.AllowAction {
			return nil
		}
	}
	if bound {
		return fmt.Errorf("guard: no MutatingAdmissionPolicyBinding of %s has paramRef {name: %s, namespace: %s, parameterNotFoundAction: Allow}, the Lease this guard renews; set the binding's paramRef.namespace to the guard's namespace", PolicyName, HeartbeatName, heartbeatNamespace)
	}
	return fmt.Errorf("guard: no MutatingAdmissionPolicyBinding binds %s, so it adds nothing; install the guard's manifests", PolicyName)
}
