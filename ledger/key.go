package ledger

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Key Secret defaults.
const (
	// KeySecretName is the default name of the Secret holding the key.
	KeySecretName = "finale-record-key"
	// KeySecretKey is the data key of the Secret that holds the key bytes.
	KeySecretKey = "key"
)

// KeyClient is what LoadKey needs: a live reader (not a cache: the key
// Secret must not be cached with every other Secret) and a writer.
type KeyClient interface {
	client.Reader
	client.Writer
}

// LoadKey reads the operator key from the Secret namespace/name (name ""
// is KeySecretName), creating it with a random key when it does not exist,
// so a fresh installation needs no step. A Secret that exists without a
// valid key is an error, never replaced: replacing it would make every
// record and sentinel unverifiable.
func LoadKey(ctx context.Context, c KeyClient, namespace, name string) (Key, error) {
	if name == "" {
		name = KeySecretName
	}
	if namespace == "" {
		return Key{}, fmt.Errorf("%w: no namespace for the key Secret", ErrKey)
	}
	for try := 0; try < 2; try++ {
		var s corev1.Secret
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s)
		if err == nil {
			k, err := NewKey(s.Data[KeySecretKey])
			if err != nil {
				return Key{}, fmt.Errorf("%w: Secret %s/%s, data key %q: %w; restore the key from a backup (records and sentinels were made with it)", ErrKey, namespace, name, KeySecretKey, err)
			}
			return k, nil
		}
		if !apierrors.IsNotFound(err) {
			return Key{}, fmt.Errorf("%w: read Secret %s/%s: %w", ErrKey, namespace, name, err)
		}
		k := GenerateKey()
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "finale"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{KeySecretKey: k.b},
		}
		err = c.Create(ctx, &s)
		if err == nil {
			return k, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return Key{}, fmt.Errorf("%w: create Secret %s/%s: %w", ErrKey, namespace, name, err)
		}
		// Another replica created it first: read theirs.
	}
	return Key{}, fmt.Errorf("%w: Secret %s/%s appeared and vanished; retry", ErrKey, namespace, name)
}
