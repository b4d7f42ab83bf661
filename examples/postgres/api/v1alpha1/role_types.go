package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of a Role's password.
const (
	// DefaultPasswordSecretKey is the key read from, or written to, a
	// password Secret when none is named.
	DefaultPasswordSecretKey = "password"
	// DefaultGeneratedPasswordLength is the length of a generated password.
	DefaultGeneratedPasswordLength = 32
	// GeneratedSecretSuffix makes the default name of a generated password
	// Secret: the Role's name plus this suffix.
	GeneratedSecretSuffix = "-password"
	// AppliedPasswordAnnotation, on a generated password Secret, marks the
	// password PostgreSQL was last given (a SHA-256 of the Role's UID and
	// the password, never the password): PostgreSQL cannot show a
	// password, so this is how the operator tells that the Secret's
	// password changed. A Secret whose password does not match its mark,
	// or that has none, has its password applied at the next reconcile.
	AppliedPasswordAnnotation = "postgres.finale.dev/applied-password"
)

// SecretKeySelector names a key of a Secret in the same namespace.
type SecretKeySelector struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key in the Secret's data.
	// +kubebuilder:default=password
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// GeneratedPassword asks the operator to generate a password into a Secret
// that the Role owns (and that is deleted with it).
//
// The contract: the Secret is the password's source of truth, and the
// operator keeps PostgreSQL in line with it.
//
//   - The operator creates the Secret (controlled by the Role) with a new
//     random password, and gives that password to the role.
//   - A deleted Secret is created again with a new random password, which
//     is applied to PostgreSQL at once: deleting the Secret is how to
//     rotate the password.
//   - An edit of the Secret's password is applied to PostgreSQL at once (the
//     operator watches the Secrets its Roles control). The password must be
//     printable ASCII; Length applies only to passwords the operator
//     generates.
//   - Nothing else changes the password: edits of the Role's spec (login,
//     connectionLimit, length) never generate one, and an ALTER ROLE they
//     need carries the Secret's current password. Changing secretName
//     generates a new password into the newly named Secret (a rotation);
//     the old Secret stays until the Role goes.
//   - A Secret of that name that the Role does not control is never used,
//     written or adopted, whoever created it: the Role reports
//     PasswordSecretNotOwned in its Synced condition until it is deleted or
//     secretName names a free Secret.
//
// Which password PostgreSQL has is remembered on the Secret
// (AppliedPasswordAnnotation), because PostgreSQL cannot be asked.
type GeneratedPassword struct {
	// SecretName is the Secret to create; by default the Role's name plus
	// "-password". It holds the keys "username" and "password".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// Length of the generated password.
	// +kubebuilder:default=32
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=128
	// +optional
	Length int32 `json:"length,omitempty"`
}

// RolePassword is where a Role's password comes from: exactly one source.
// +kubebuilder:validation:XValidation:rule="!(has(self.secretKeyRef) && has(self.generate))",message="password.secretKeyRef and password.generate are mutually exclusive: use secretKeyRef to read an existing Secret, or generate to have the operator create one, not both"
// +kubebuilder:validation:XValidation:rule="has(self.secretKeyRef) || has(self.generate)",message="password needs a source: set password.secretKeyRef (an existing Secret) or password.generate (the operator creates one), or remove password for a role without one"
type RolePassword struct {
	// SecretKeyRef reads the password from an existing Secret, which the
	// user owns: the operator never writes it and does not watch it. Its
	// password is given to the role when the role is created and whenever
	// login or connectionLimit are changed; an edit of that Secret alone is
	// not noticed (use generate for a password the operator keeps applied).
	// +optional
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty"`
	// Generate has the operator generate the password into a Secret the Role
	// owns. That Secret is the password's source of truth: deleting it
	// generates and applies a new password (a rotation), an edit of its
	// password is applied, and nothing else changes the password. A Secret
	// of that name the Role does not own is never used (reason
	// PasswordSecretNotOwned).
	// +optional
	Generate *GeneratedPassword `json:"generate,omitempty"`
}

// RoleSpec is a PostgreSQL role.
type RoleSpec struct {
	// ServerRef names the Server the role lives on.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serverRef is immutable: a Role cannot move to another server; create a new Role instead"
	ServerRef ServerReference `json:"serverRef"`
	// RoleName is the role's name in PostgreSQL: a lowercase identifier
	// (letters, digits, underscores, $), at most 63 characters, not starting
	// with pg_. It cannot change.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z_][a-z0-9_$]*$')",message="roleName must be a lowercase PostgreSQL identifier: start with a lowercase letter or underscore, then lowercase letters, digits, underscores or $ (for example app_reader)"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('pg_')",message="roleName must not start with pg_: PostgreSQL reserves those names"
	// +kubebuilder:validation:XValidation:rule="!(self in ['public', 'none', 'current_user', 'current_role', 'session_user'])",message="roleName must not be public, none, current_user, current_role or session_user: PostgreSQL reserves those names"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="roleName is immutable: to rename, create a new Role and delete this one"
	RoleName string `json:"roleName"`
	// Login lets the role log in. As in PostgreSQL, false by default.
	// +optional
	Login bool `json:"login,omitempty"`
	// ConnectionLimit is how many concurrent connections the role may make;
	// -1 (the default) is no limit.
	// +kubebuilder:default=-1
	// +kubebuilder:validation:Minimum=-1
	// +optional
	ConnectionLimit *int32 `json:"connectionLimit,omitempty"`
	// Password of the role; none when unset.
	// +optional
	Password *RolePassword `json:"password,omitempty"`
	// DeletionPolicy: Delete (the default) drops the role when this object is
	// deleted; Retain leaves it.
	// +kubebuilder:default=Delete
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// RoleStatus is what the operator last observed of the role.
type RoleStatus struct {
	// Conditions: Ready, Synced.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Role is a PostgreSQL role on a Server.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories={finale,postgres},shortName=pgrole
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.spec.serverRef.name`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.roleName`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.deletionPolicy`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Role struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RoleSpec   `json:"spec"`
	Status RoleStatus `json:"status,omitempty"`
}

// GeneratedSecretName is the Secret a generated password goes to, or ""
// when the password is not generated.
func (r *Role) GeneratedSecretName() string {
	p := r.Spec.Password
	if p == nil || p.Generate == nil {
		return ""
	}
	if p.Generate.SecretName != "" {
		return p.Generate.SecretName
	}
	return r.Name + GeneratedSecretSuffix
}

// RoleList is a list of Roles.
// +kubebuilder:object:root=true
type RoleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Role `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Role{}, &RoleList{})
}
