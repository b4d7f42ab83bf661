package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/keyclient"
	"github.com/finale-dev/finale/lifecycle"
)

// Reasons and messages of what only the user can fix (lifecycle puts them
// in the APIKey's Synced condition and retries).
const (
	ReasonTokenSecretMissing = "TokenSecretMissing"
	ReasonTokenMissing       = "TokenMissing"
	ReasonKeyServerInvalid   = "KeyServerInvalid"

	MessageTokenSecretMissing = "token Secret %q does not exist in namespace %s: create it with the bearer token under key %q"
	MessageTokenMissing       = "token Secret %q has no non-empty key %q: put the key service's bearer token there"
)

// Key selects a pooled client: everything a client is bound to and nothing
// secret. SecretVersion is the token Secret's resourceVersion, so that a
// changed token gets a new client instead of the cached one.
type Key struct {
	Namespace, KeyServer string
	URL                  string
	Secret, TokenKey     string
	SecretVersion        string
}

func (k Key) String() string { return fmt.Sprintf("%s/%s (%s)", k.Namespace, k.KeyServer, k.URL) }

// Pool is the operator's pool of key-service clients.
type Pool = clientpool.Pool[Key, *keyclient.Client]

// keyServers resolves KeyServers to pool keys. r is the manager's cache:
// KeyServers are read whole, token Secrets as metadata only (lifecycle
// watches them so), so no token is ever cached; dial reads it live.
type keyServers struct {
	r client.Reader
}

// Authentication implements lifecycle.Authenticator: what makes sure a
// KeyServer's client reaches the service itself and not a copy behind a
// proxy. The key service keeps the tokens it answers proofs with apart
// from its data (service.Options.IdentityDir), so a copy of the data,
// which is what a backup or a staging copy is, cannot answer one; over
// https the server's certificate and host name are verified as well. A
// copy that also has the identity store is the service's identity, as a
// PostgreSQL copy holding the server's TLS key would be: not defended.
func (keyServers) Authentication(k Key) string {
	if strings.HasPrefix(k.URL, "https://") {
		return AuthHTTPS
	}
	return AuthIdentityStore
}

// Authentications (Authentication).
const (
	AuthIdentityStore = "the key service answers proofs from an identity store kept apart from its data: a copy of the data holds no token"
	AuthHTTPS         = AuthIdentityStore + "; https verifies the server's certificate and host name"
)

var _ lifecycle.Authenticator[Key] = adapter{}

// connect returns the connection of the KeyServer ns/name; Parent is nil
// when it does not exist.
func (s keyServers) connect(ctx context.Context, ns, name string) (lifecycle.Connection[Key], error) {
	var ks v1alpha1.KeyServer
	if err := s.r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &ks); err != nil {
		if apierrors.IsNotFound(err) {
			return lifecycle.Connection[Key]{}, nil
		}
		return lifecycle.Connection[Key]{}, fmt.Errorf("get KeyServer %s/%s: %w", ns, name, err)
	}
	key, err := s.key(ctx, &ks)
	return lifecycle.Connection[Key]{Key: key, Parent: &ks}, err
}

// key builds ks's pool key with the token Secret's version.
func (s keyServers) key(ctx context.Context, ks *v1alpha1.KeyServer) (Key, error) {
	ref := ks.Spec.TokenSecretRef
	k := Key{Namespace: ks.Namespace, KeyServer: ks.Name, URL: ks.Spec.URL, Secret: ref.Name, TokenKey: ref.Key}
	if k.TokenKey == "" {
		k.TokenKey = v1alpha1.DefaultTokenKey
	}
	sec := &metav1.PartialObjectMetadata{}
	sec.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := s.r.Get(ctx, types.NamespacedName{Namespace: ks.Namespace, Name: ref.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return k, &lifecycle.NeedsAction{Reason: ReasonTokenSecretMissing, Err: fmt.Errorf(MessageTokenSecretMissing, ref.Name, ks.Namespace, k.TokenKey)}
		}
		return k, fmt.Errorf("get token Secret %s/%s: %w", ks.Namespace, ref.Name, err)
	}
	k.SecretVersion = sec.ResourceVersion
	return k, nil
}

// dial makes the client of k, reading the token live through r (an
// uncached reader: the manager's APIReader).
func dial(r client.Reader) clientpool.DialFn[Key, *keyclient.Client] {
	return func(ctx context.Context, k Key) (*keyclient.Client, error) {
		var s corev1.Secret
		if err := r.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Secret}, &s); err != nil {
			return nil, fmt.Errorf("read token Secret %s/%s: %w", k.Namespace, k.Secret, err)
		}
		// A token written with echo ends in a newline; it is not part of it.
		token := strings.TrimSpace(string(s.Data[k.TokenKey]))
		if token == "" {
			return nil, &lifecycle.NeedsAction{Reason: ReasonTokenMissing, Err: fmt.Errorf(MessageTokenMissing, k.Secret, k.TokenKey)}
		}
		c, err := keyclient.New(k.URL, token, keyclient.Options{})
		if err != nil {
			return nil, &lifecycle.NeedsAction{Reason: ReasonKeyServerInvalid, Err: err}
		}
		return c, nil
	}
}
