package controller

import (
	"context"
	"crypto/rand"
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

// Reasons of a Role whose password cannot be had.
const (
	ReasonPasswordSecretMissing = "PasswordSecretMissing"
	MessagePasswordMissing      = "password Secret %q has no key %q (or does not exist): create it, or use password.generate"
)

// passwords reads a Role's password from its Secret, or generates one into
// a Secret the Role owns (garbage-collected with it).
type passwords struct {
	r      client.Reader
	w      client.Writer
	scheme *runtime.Scheme
}

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
	name := r.GeneratedSecretName()
	var s corev1.Secret
	err := p.r.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: name}, &s)
	if err == nil {
		if pw := s.Data[v1alpha1.DefaultPasswordSecretKey]; len(pw) > 0 {
			return catalog.Password(pw), nil
		}
		return "", &lifecycle.NeedsAction{Reason: ReasonPasswordSecretMissing, Err: fmt.Errorf(MessagePasswordMissing, name, v1alpha1.DefaultPasswordSecretKey)}
	}
	if !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("read generated password Secret %s/%s: %w", r.Namespace, name, err)
	}
	length := int(orDefault(spec.Generate.Length, v1alpha1.DefaultGeneratedPasswordLength))
	pw := rand.Text()
	for len(pw) < length {
		pw += rand.Text()
	}
	pw = pw[:length]
	s = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: name},
		Type:       corev1.SecretTypeBasicAuth,
		Data:       map[string][]byte{"username": []byte(r.Spec.RoleName), v1alpha1.DefaultPasswordSecretKey: []byte(pw)},
	}
	if err := controllerutil.SetControllerReference(r, &s, p.scheme); err != nil {
		return "", err
	}
	if err := p.w.Create(ctx, &s); err != nil {
		// A create that raced another (or whose answer was lost) is read
		// again on the next reconcile; never two passwords.
		return "", fmt.Errorf("create generated password Secret %s/%s: %w", r.Namespace, name, err)
	}
	return catalog.Password(pw), nil
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
