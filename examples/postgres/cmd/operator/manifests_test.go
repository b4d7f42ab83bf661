package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/finale-dev/finale/examples/postgres/cmd/operator/app"
)

// find decodes the one rendered object of kind and name into out.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("config/default renders no %s %s", kind, name)
}

var (
	digest     = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)
	releaseTag = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)
)

// pinned: an image by digest, or by a release tag (vX.Y.Z) on its last
// path segment; never untagged (latest) or :latest.
func pinned(image string) bool {
	if digest.MatchString(image) {
		return true
	}
	last := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(last, ":")
	return ok && releaseTag.MatchString(tag)
}

// config/default, rendered by kubectl kustomize, runs a pinned image as a
// fixed non-root user on a read-only root filesystem, with no capabilities,
// no privilege escalation and the runtime's seccomp profile; it passes the
// binary only flags it defines, serves metrics securely, and grants the
// operator on Secrets only what it uses (with the admission policy that
// narrows it) and a scraper only GET /metrics.
func TestManifestsAreHardened(t *testing.T) {
	objs := render(t)

	var d appsv1.Deployment
	find(t, objs, "Deployment", "finale-postgres-operator", &d)
	pod := d.Spec.Template.Spec
	if pod.SecurityContext == nil || !ptrTrue(pod.SecurityContext.RunAsNonRoot) || pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", pod.SecurityContext)
	}
	if sp := pod.SecurityContext.SeccompProfile; sp == nil || sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccompProfile %+v, want RuntimeDefault", sp)
	}
	if len(pod.Containers) == 0 {
		t.Fatal("no containers")
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		t.Run(c.Name, func(t *testing.T) {
			if !pinned(c.Image) {
				t.Errorf("image %q is not pinned (want :vX.Y.Z or @sha256:...)", c.Image)
			}
			sc := c.SecurityContext
			if sc == nil {
				t.Fatal("no securityContext")
			}
			checks := map[string]bool{
				"readOnlyRootFilesystem":         ptrTrue(sc.ReadOnlyRootFilesystem),
				"allowPrivilegeEscalation false": sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
				"privileged not true":            !ptrTrue(sc.Privileged),
				"capabilities drop ALL":          sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL") && len(sc.Capabilities.Add) == 0,
				"runAsNonRoot not false":         sc.RunAsNonRoot == nil || *sc.RunAsNonRoot,
				"runAsUser not 0":                sc.RunAsUser == nil || *sc.RunAsUser != 0,
				"seccomp not Unconfined":         sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined,
			}
			for what, ok := range checks {
				if !ok {
					t.Errorf("container securityContext: %s fails in %+v", what, sc)
				}
			}
			fs, _ := app.NewFlags()
			if err := fs.Parse(c.Args); err != nil {
				t.Errorf("the Deployment passes flags the binary does not define: %v", err)
			}
			if !slices.Contains(c.Args, "--metrics-bind-address=:8443") || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-secure=") }) {
				t.Errorf("args %q: want metrics on :8443 with the secure default", c.Args)
			}
		})
	}

	var op rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "finale-postgres-operator", &op)
	var secretVerbs []string
	for _, r := range op.Rules {
		if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
			t.Errorf("wildcard rule %+v", r)
		}
		if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "secrets") {
			secretVerbs = append(secretVerbs, r.Verbs...)
		}
	}
	slices.Sort(secretVerbs)
	if diff := cmp.Diff([]string{"create", "get", "list", "patch", "watch"}, secretVerbs); diff != "" {
		t.Errorf("the operator's verbs on Secrets (-want +got):\n%s", diff)
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	find(t, objs, "ValidatingAdmissionPolicy", "finale-postgres-operator-secrets", &policy)
	var policyBinding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	find(t, objs, "ValidatingAdmissionPolicyBinding", "finale-postgres-operator-secrets", &policyBinding)
	if policyBinding.Spec.PolicyName != policy.Name || !slices.Contains(policyBinding.Spec.ValidationActions, admissionregistrationv1.Deny) {
		t.Errorf("policy binding %+v does not deny with %s", policyBinding.Spec, policy.Name)
	}

	var auth rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "finale-postgres-metrics-auth", &auth)
	wantAuth := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if diff := cmp.Diff(wantAuth, auth.Rules); diff != "" {
		t.Errorf("metrics auth rules (-want +got):\n%s", diff)
	}
	var authBinding rbacv1.ClusterRoleBinding
	find(t, objs, "ClusterRoleBinding", "finale-postgres-metrics-auth", &authBinding)
	if diff := cmp.Diff([]rbacv1.Subject{{Kind: "ServiceAccount", Name: manifestSA, Namespace: manifestNamespace}}, authBinding.Subjects); diff != "" {
		t.Errorf("metrics auth binding subjects (-want +got):\n%s", diff)
	}
	var reader rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "finale-postgres-metrics-reader", &reader)
	if diff := cmp.Diff([]rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}, reader.Rules); diff != "" {
		t.Errorf("metrics reader rules (-want +got):\n%s", diff)
	}
	var svc corev1.Service
	find(t, objs, "Service", "finale-postgres-operator-metrics", &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8443 {
		t.Errorf("metrics Service ports %+v, want 8443", svc.Spec.Ports)
	}
}

func ptrTrue(b *bool) bool { return b != nil && *b }

func TestPinned(t *testing.T) {
	cases := map[string]bool{
		"ghcr.io/finale-dev/op:v0.1.0":                             true,
		"registry.local:5000/op:v1.2.3":                            true,
		"ghcr.io/finale-dev/op@sha256:" + strings.Repeat("ab", 32): true,
		"ghcr.io/finale-dev/op:latest":                             false,
		"ghcr.io/finale-dev/op":                                    false,
		"registry.local:5000/op":                                   false,
		"ghcr.io/finale-dev/op:main":                               false,
	}
	got := map[string]bool{}
	for img := range cases {
		got[img] = pinned(img)
	}
	if diff := cmp.Diff(cases, got); diff != "" {
		t.Errorf("pinned (-want +got):\n%s", diff)
	}
}
