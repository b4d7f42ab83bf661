package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Key identifies a pooled SDK client: everything it is bound to at dial
// time and nothing secret (the API key is read per call, so only the
// Secret's name is here, as in the seed's ClientPoolKey).
type Key struct {
	HostPort          string
	TemporalNamespace string
	// Namespace, Secret and SecretKey name the API key: the Kubernetes
	// namespace and Secret it is read from, and the key in its data.
	Namespace, Secret, SecretKey string
	Plaintext                    bool
}

func (k Key) String() string {
	return fmt.Sprintf("%s (namespace %s, API key %s/%s)", k.HostPort, k.TemporalNamespace, k.Namespace, k.Secret)
}

// ErrAPIKeyUnavailable is wrapped by the error of an API key that could
// not be read from its Secret. A call whose key cannot be read fails with
// an Unauthenticated status carrying that error's text (Auth): see
// apiKeyStatus.
var ErrAPIKeyUnavailable = errors.New("the Temporal API key could not be read from its Secret")

var errKeyAbsent = errors.New("no such key")

// dialer dials SDK clients whose credentials read the Secret on every call.
type dialer struct {
	secrets  client.Reader
	identity string
	logger   sdklog.Logger
	// opts, when set, adjusts the client options (tests: keepalive).
	opts  func(*sdkclient.Options)
	dials atomic.Int64
}

func (d *dialer) Dial(ctx context.Context, k Key) (sdkclient.Client, error) {
	d.dials.Add(1)
	o := sdkclient.Options{
		HostPort:  k.HostPort,
		Namespace: k.TemporalNamespace,
		Identity:  d.identity,
		Logger:    d.logger,
		Credentials: sdkclient.NewAPIKeyDynamicCredentials(func(ctx context.Context) (string, error) {
			key, err := readAPIKey(ctx, d.secrets, k)
			return key, apiKeyStatus(err)
		}),
		ConnectionOptions: sdkclient.ConnectionOptions{TLSDisabled: k.Plaintext},
	}
	if d.opts != nil {
		d.opts(&o)
	}
	return sdkclient.DialContext(ctx, o)
}

// apiKeyStatus makes an API key that cannot be read fail its call at once
// as Unauthenticated. The SDK retries an error without a gRPC status (it
// reads as Unknown) until its call timeout, and then reports
// DeadlineExceeded: every call would hang 10 s and read as a connection
// that does not answer (Transport), when the credential is what is
// missing.
func apiKeyStatus(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(codes.Unauthenticated, err.Error())
}

func readAPIKey(ctx context.Context, r client.Reader, k Key) (string, error) {
	var s corev1.Secret
	if err := r.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Secret}, &s); err != nil {
		return "", fmt.Errorf("%w: %s/%s: %w", ErrAPIKeyUnavailable, k.Namespace, k.Secret, err)
	}
	v, ok := s.Data[k.SecretKey]
	if !ok || len(v) == 0 {
		return "", fmt.Errorf("%w: %s/%s: %w %q", ErrAPIKeyUnavailable, k.Namespace, k.Secret, errKeyAbsent, k.SecretKey)
	}
	return string(v), nil
}

// discardLogger keeps the SDK quiet: what matters reaches conditions,
// Events and the watchdog.
var discardLogger sdklog.Logger = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))

// isAccessDenied is the naive build's only eviction rule, as in
// temporal-worker-controller v1.7 (isAccessDeniedErr).
func isAccessDenied(err error) bool {
	var pd *serviceerror.PermissionDenied
	return errors.As(err, &pd) || status.Code(err) == codes.Unauthenticated
}

// isNotFound reports a NotFound answer from the server, and nothing else:
// a missing Secret or Connection is not a deployment that is gone.
func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}
