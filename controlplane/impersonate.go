package controlplane

import (
	"k8s.io/client-go/rest"
)

// AsServiceAccount returns a copy of the admin config that impersonates the
// ServiceAccount namespace/name, with the groups the apiserver gives a real
// service-account token. RBAC decides what it may do.
func (cp *ControlPlane) AsServiceAccount(namespace, name string) *rest.Config {
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	return cfg
}
