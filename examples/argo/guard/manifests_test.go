package guard_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/examples/argo/guard"
)

const configDir = "../config"

// manifestNamespace is the namespace config/default installs the guard in.
const manifestNamespace = "argo"

func readYAML(t *testing.T, rel string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(configDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// The installed policy is the one the code defines (and the tests run).
func TestManifestPolicyIsGuardPolicy(t *testing.T) {
	var p admissionv1.MutatingAdmissionPolicy
	readYAML(t, "policy/policy.yaml", &p)
	if diff := cmp.Diff(guard.Policy(), &p); diff != "" {
		t.Errorf("config/policy/policy.yaml differs from guard.Policy() (-code +manifest):\n%s", diff)
	}
	var b admissionv1.MutatingAdmissionPolicyBinding
	readYAML(t, "policy/binding.yaml", &b)
	if diff := cmp.Diff(guard.Binding(guard.PolicyName, nil, manifestNamespace), &b); diff != "" {
		t.Errorf("config/policy/binding.yaml differs from guard.Binding (-code +manifest):\n%s", diff)
	}
}

// The Deployment is hardened: a pinned image tag, non-root, read-only root
// filesystem, every capability dropped, no privilege escalation, seccomp
// RuntimeDefault.
func TestManifestDeploymentIsHardened(t *testing.T) {
	var d appsv1.Deployment
	readYAML(t, "manager/manager.yaml", &d)
	spec := d.Spec.Template.Spec
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod seccompProfile is not RuntimeDefault")
	}
	if spec.ServiceAccountName != "finale-argo-guard" {
		t.Errorf("serviceAccountName = %q", spec.ServiceAccountName)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	name, tag, ok := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":")
	if !ok || tag == "" || tag == "latest" || name == "" {
		t.Errorf("image %q: want a pinned tag", c.Image)
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("container has no securityContext")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem is not true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0:
		t.Errorf("capabilities = %+v, want drop [ALL] and nothing added", sc.Capabilities)
	}
}

// Every kustomization names files that exist.
func TestManifestKustomizationsResolve(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(configDir, "*", "kustomization.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("kustomizations: %v (%d)", err, len(files))
	}
	for _, f := range files {
		var k struct {
			APIVersion string   `json:"apiVersion"`
			Kind       string   `json:"kind"`
			Namespace  string   `json:"namespace,omitempty"`
			Resources  []string `json:"resources"`
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, &k); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, r := range k.Resources {
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), r)); err != nil {
				t.Errorf("%s: resource %s: %v", f, r, err)
			}
		}
	}
}
