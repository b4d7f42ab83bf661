package controller

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/lifecycle"
)

// Reasons and messages of a Role whose password cannot be had.
const (
	ReasonPasswordSecretMissing = "PasswordSecretMissing"
	MessagePasswordMissing      = "password Secret %q has no key %q (or does not exist): create it, or use password.generate"
	// MessageGeneratedPasswordEmpty: the Role's own generated Secret lost
	// its password. The Secret is the password's source of truth, so the
	// operator does not invent one into it behind the user's back.
	MessageGeneratedPasswordEmpty = "generated password Secret %q has no key %q: put the password back, or delete the Secret to have a new password generated and applied"
	// ReasonPasswordSecretNotOwned: a Secret of the generated Secret's name
	// exists and is not controlled by this Role. It is never adopted: its
	// password was not generated for this Role and whoever wrote it may
	// read it.
	ReasonPasswordSecretNotOwned  = "PasswordSecretNotOwned"
	MessagePasswordSecretNotOwned = "password Secret %q exists and is not owned by this Role, so its password is not used: delete it (a new one is generated), set password.generate.secretName to a free name, or use password.secretKeyRef to name a Secret you manage"
)

// passwords reads a Role's password from its Secret, or generates one into
// a Secret the Role owns (garbage-collected with it), and remembers on that
// Secret which password PostgreSQL has (v1alpha1.AppliedPasswordAnnotation),
// because PostgreSQL cannot be asked.
type passwords struct {
	// r is the manager's cached client; live reads the API server, for the
	// one answer a lagging cache must not give: that a generated Secret is
	// gone (a new password follows from it). Nil live is r.
	r      client.Reader
	live   client.Reader
	w      client.Writer
	scheme *runtime.Scheme
}

// of is the password to give the role in a CREATE or ALTER: the referenced
// Secret's, or the generated Secret's, generated now into a new Secret when
// there is none.
func (p passwords) of(ctx context.Context, r *v1alpha1.Role) (catalog.Password, error) {
	spec := r.Spec.Password
	switch {
	case spec == nil:
		return "", nil
	case spec.SecretKeyRef != nil:
		key := orDefault(spec.SecretKeyRef.Key, v1alpha1.DefaultPasswordSecretKey)
		var s corev1.Secret
		err := p.r.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: spec.SecretKeyRef.Name}, &s)
		if client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("read password Secret %s/%s: %w", r.Namespace, spec.SecretKeyRef.Name, err)
		}
		if len(s.Data[key]) == 0 {
			return "", &lifecycle.NeedsAction{Reason: ReasonPasswordSecretMissing, Err: fmt.Errorf(MessagePasswordMissing, spec.SecretKeyRef.Name, key)}
		}
		return catalog.Password(s.Data[key]), nil
	}
	s, err := p.generated(ctx, r)
	if err != nil {
		return "", err
	}
	if s == nil {
		if s, err = p.generate(ctx, r); err != nil {
			return "", err
		}
	}
	return generatedPassword(s)
}

// applied reports whether PostgreSQL has the password the Role's Secret
// holds now, as far as the operator can know: always for a password from
// secretKeyRef or none (the operator writes no Secret it does not own, so
// it has nowhere to remember), and for a generated one when its Secret
// exists and carries the mark of its current password.
func (p passwords) applied(ctx context.Context, r *v1alpha1.Role) (bool, error) {
	if r.GeneratedSecretName() == "" {
		return true, nil
	}
	s, err := p.generated(ctx, r)
	if err != nil || s == nil {
		return false, err
	}
	pw, err := generatedPassword(s)
	if err != nil {
		return false, err
	}
	return s.Annotations[v1alpha1.AppliedPasswordAnnotation] == appliedMark(r, pw), nil
}

// markApplied records on the generated Secret that PostgreSQL now has pw.
// Call it only after a statement that set pw succeeded. The mark names what
// was applied, so a Secret edited in the meantime carries a mark that does
// not match its new password, and that password is applied next.
func (p passwords) markApplied(ctx context.Context, r *v1alpha1.Role, pw catalog.Password) error {
	if r.GeneratedSecretName() == "" {
		return nil
	}
	s, err := p.generated(ctx, r)
	var na *lifecycle.NeedsAction
	if errors.As(err, &na) || err == nil && s == nil {
		// Replaced or deleted since the statement read it: the next
		// reconcile (the Secret's event) deals with what is there now.
		return nil
	}
	if err != nil {
		return err
	}
	mark := appliedMark(r, pw)
	if s.Annotations[v1alpha1.AppliedPasswordAnnotation] == mark {
		return nil
	}
	base := s.DeepCopy()
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[v1alpha1.AppliedPasswordAnnotation] = mark
	if err := p.w.Patch(ctx, s, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("mark the password of Secret %s/%s applied: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// generated reads the Role's generated password Secret: nil when it does
// not exist (asked of the API server, not only the cache), a NeedsAction
// when it exists and this Role is not its controller.
func (p passwords) generated(ctx context.Context, r *v1alpha1.Role) (*corev1.Secret, error) {
	key := types.NamespacedName{Namespace: r.Namespace, Name: r.GeneratedSecretName()}
	var s corev1.Secret
	err := p.r.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) && p.live != nil {
		err = p.live.Get(ctx, key, &s)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read generated password Secret %s/%s: %w", r.Namespace, key.Name, err)
	}
	if !metav1.IsControlledBy(&s, r) {
		return nil, &lifecycle.NeedsAction{Reason: ReasonPasswordSecretNotOwned, Err: fmt.Errorf(MessagePasswordSecretNotOwned, key.Name)}
	}
	return &s, nil
}

// generate creates the Role's Secret with a new random password. The Secret
// does not carry the applied mark: the statement that applies the password
// comes after, and only its success may add the mark.
func (p passwords) generate(ctx context.Context, r *v1alpha1.Role) (*corev1.Secret, error) {
	length := int(orDefault(r.Spec.Password.Generate.Length, v1alpha1.DefaultGeneratedPasswordLength))
	pw := rand.Text()
	for len(pw) < length {
		pw += rand.Text()
	}
	pw = pw[:length]
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.GeneratedSecretName()},
		Type:       corev1.SecretTypeBasicAuth,
		Data:       map[string][]byte{"username": []byte(r.Spec.RoleName), v1alpha1.DefaultPasswordSecretKey: []byte(pw)},
	}
	if err := controllerutil.SetControllerReference(r, s, p.scheme); err != nil {
		return nil, err
	}
	err := p.w.Create(ctx, s)
	if apierrors.IsAlreadyExists(err) {
		// Created since the read (an earlier attempt whose answer was
		// lost, or someone else): use what is there, never two passwords,
		// and only if this Role owns it.
		if s, err := p.generated(ctx, r); err != nil || s != nil {
			return s, err
		}
		return nil, fmt.Errorf("create generated password Secret %s/%s: it existed a moment ago and is gone now; retry", r.Namespace, r.GeneratedSecretName())
	}
	if err != nil {
		return nil, fmt.Errorf("create generated password Secret %s/%s: %w", r.Namespace, r.GeneratedSecretName(), err)
	}
	return s, nil
}

func generatedPassword(s *corev1.Secret) (catalog.Password, error) {
	pw := s.Data[v1alpha1.DefaultPasswordSecretKey]
	if len(pw) == 0 {
		return "", &lifecycle.NeedsAction{Reason: ReasonPasswordSecretMissing, Err: fmt.Errorf(MessageGeneratedPasswordEmpty, s.Name, v1alpha1.DefaultPasswordSecretKey)}
	}
	return catalog.Password(pw), nil
}

// appliedMark is the value of v1alpha1.AppliedPasswordAnnotation for pw on
// r's Secret: a SHA-256 of the Role's UID and the password. It sits on the
// Secret that holds the password itself, so it tells its readers nothing
// new; the UID keeps a mark copied from another Role's Secret from
// matching.
func appliedMark(r *v1alpha1.Role, pw catalog.Password) string {
	h := sha256.New()
	h.Write([]byte(r.UID))
	h.Write([]byte{0})
	h.Write([]byte(pw))
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// actionable turns a refusal the user resolves (a *catalog.Error of class
// Conflict or Invalid) into a lifecycle.NeedsAction whose reason is the
// catalog's; the catalog's message already says what to do.
func actionable(err error) error {
	var ce *catalog.Error
	if errors.As(err, &ce) && ce.Class() != errclass.NotFound {
		return &lifecycle.NeedsAction{Reason: string(ce.Reason), Err: err}
	}
	return err
}
