package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SSLMode is libpq's sslmode.
// +kubebuilder:validation:Enum=disable;allow;prefer;require;verify-ca;verify-full
type SSLMode string

// The SSL modes, as libpq names them.
const (
	SSLModeDisable    SSLMode = "disable"
	SSLModeAllow      SSLMode = "allow"
	SSLModePrefer     SSLMode = "prefer"
	SSLModeRequire    SSLMode = "require"
	SSLModeVerifyCA   SSLMode = "verify-ca"
	SSLModeVerifyFull SSLMode = "verify-full"
)

// Defaults of the credentials Secret's keys.
const (
	DefaultUsernameKey = "username"
	DefaultPasswordKey = "password"
	DefaultCAKey       = "ca.crt"
)

// CredentialsSecretReference names the Secret, in the Server's namespace,
// that holds the login the operator uses.
type CredentialsSecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// UsernameKey is the key of the user name in the Secret's data.
	// +kubebuilder:default=username
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	UsernameKey string `json:"usernameKey,omitempty"`
	// PasswordKey is the key of the password in the Secret's data.
	// +kubebuilder:default=password
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PasswordKey string `json:"passwordKey,omitempty"`
	// CAKey is the key, in the same Secret, of the PEM certificates of the
	// CAs the server's certificate must chain to with sslMode verify-ca or
	// verify-full (libpq's sslrootcert); ca.crt by default, as cert-manager
	// and most Secrets holding a CA name it. A verify-ca or verify-full
	// Server whose Secret lacks the key is not used, and its Ready
	// condition says so (CACertificateMissing): never a silent fallback
	// to another CA. Set spec.trustSystemRoots instead for a server whose
	// certificate a public CA issued. Other sslModes check no certificate
	// and ignore it. It lives with the credentials so that the hold keeps
	// it while dependents still need to connect: a CA elsewhere could be
	// deleted while they do.
	// +kubebuilder:default=ca.crt
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CAKey string `json:"caKey,omitempty"`
}

// ServerSpec says how to reach a PostgreSQL server and as whom.
type ServerSpec struct {
	// Host is the server's DNS name or IP address.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!self.contains('/') && !self.contains(' ')",message="host must be a DNS name or an IP address, without scheme, path or spaces (for example db.example.com or 10.0.0.5)"
	Host string `json:"host"`
	// Port is the server's TCP port.
	// +kubebuilder:default=5432
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
	// Database is the database the operator connects to for administration
	// and keeps its deployment sentinel in (a table, created on first use;
	// the login needs CREATE on its public schema). It cannot change: the
	// sentinel proves the deployment for every cleanup record written
	// through this Server. To use another database, create another Server.
	// +kubebuilder:default=postgres
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="database is immutable: the deployment sentinel that proves this server lives in it; create another Server to use another database"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Database string `json:"database,omitempty"`
	// SSLMode is libpq's sslmode. The default, verify-full, authenticates
	// the server: its certificate must chain to the CA in the credential
	// Secret (credentialsSecretRef.caKey, ca.crt by default) and name
	// spec.host. Only verify-full does: the sweeper deletes and removes
	// cleanup records only through such a Server, because through any
	// other a copy of the deployment behind a proxy could answer in its
	// place. Any other sslMode still works for the Server's own Roles and
	// Databases, but the Server's SweepVerified condition is False from
	// its first reconcile: what escapes their deletion (a finalizer removed
	// by hand, a namespace force-cleaned) is kept and reported, never
	// swept, unless the administrator vouches for its host and port
	// (--sweep-trusted-hosts).
	// +kubebuilder:default=verify-full
	// +optional
	SSLMode SSLMode `json:"sslMode,omitempty"`
	// TrustSystemRoots verifies the server's certificate (sslMode verify-ca
	// or verify-full) against the operator's system roots instead of a CA
	// in the credential Secret: for a server whose certificate a public CA
	// issued. Every public CA can then vouch for spec.host. It ignores
	// credentialsSecretRef.caKey.
	// +optional
	TrustSystemRoots bool `json:"trustSystemRoots,omitempty"`
	// CredentialsSecretRef names the Secret with the operator's login.
	CredentialsSecretRef CredentialsSecretReference `json:"credentialsSecretRef"`
}

// ServerStatus is what the operator last observed of the server.
type ServerStatus struct {
	// Identity is the server's system_identifier (from pg_control_system()),
	// as a decimal string: the identity of the deployment, which cleanup
	// records are matched against.
	// +optional
	Identity string `json:"identity,omitempty"`
	// Conditions: Ready, Synced.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Server is a connection to a PostgreSQL server, with the credentials the
// operator uses there.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories={finale,postgres},shortName=pgserver
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=`.spec.host`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.port`
// +kubebuilder:printcolumn:name="Identity",type=string,JSONPath=`.status.identity`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Server struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServerSpec   `json:"spec"`
	Status ServerStatus `json:"status,omitempty"`
}

// ServerList is a list of Servers.
// +kubebuilder:object:root=true
type ServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Server `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Server{}, &ServerList{})
}
