package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ClientPoolKey is everything an SDK client is bound to when it is
// dialled. The API key is not part of it: the client reads it from its
// Secret on every call, so a rotated key needs no new client.
type ClientPoolKey struct {
	HostPort          string
	TemporalNamespace string
	SecretNamespace   string
	SecretName        string
	SecretKey         string
	Plaintext         bool
}

// errNoAPIKey says the Secret exists but holds no API key under its key.
var errNoAPIKey = errors.New("the Secret has no API key under its key")

// sdkLogger keeps the SDK's own log out of the operator's.
var sdkLogger = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))

// dialer makes SDK clients whose API key is read from its Secret before
// every call.
type dialer struct {
	secrets  client.Reader
	identity string
}

// Dial dials the frontend named by key. It fails when the frontend does
// not answer the SDK's first call.
func (d *dialer) Dial(ctx context.Context, key ClientPoolKey) (sdkclient.Client, error) {
	c, err := sdkclient.DialContext(ctx, sdkclient.Options{
		HostPort:  key.HostPort,
		Namespace: key.TemporalNamespace,
		Identity:  d.identity,
		Logger:    sdkLogger,
		Credentials: sdkclient.NewAPIKeyDynamicCredentials(func(ctx context.Context) (string, error) {
			return d.apiKey(ctx, key)
		}),
		ConnectionOptions: sdkclient.ConnectionOptions{TLSDisabled: key.Plaintext},
	})
	if err != nil {
		return nil, fmt.Errorf("dial Temporal at %s: %w", key.HostPort, err)
	}
	return c, nil
}

// apiKey reads the API key from the Secret the key names.
func (d *dialer) apiKey(ctx context.Context, key ClientPoolKey) (string, error) {
	var s corev1.Secret
	name := types.NamespacedName{Namespace: key.SecretNamespace, Name: key.SecretName}
	if err := d.secrets.Get(ctx, name, &s); err != nil {
		return "", fmt.Errorf("read API key Secret %s: %w", name, err)
	}
	v := s.Data[key.SecretKey]
	if len(v) == 0 {
		return "", fmt.Errorf("API key Secret %s, key %q: %w", name, key.SecretKey, errNoAPIKey)
	}
	return string(v), nil
}
