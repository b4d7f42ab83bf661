package controller

import (
	"testing"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/internal/testenv"
)

// TestAPIKeyGoneAtCallTime: a client whose API-key Secret is deleted after
// its dial fails its next call at once, as Auth: a credential that cannot
// be read, not a connection that does not answer, and never a deployment
// that is gone. (The SDK retries an error without a gRPC status until its
// 10 s call timeout, and then reports DeadlineExceeded: every call would
// hang 10 s and read as Transport.)
func TestAPIKeyGoneAtCallTime(t *testing.T) {
	ctx := t.Context()
	ts := testenv.Temporal(t)
	c := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, c)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "temporal-api-key"},
		Data:       map[string][]byte{"api-key": []byte("finale-test-key")},
	}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	d := &dialer{secrets: c, identity: "finale-test", logger: discardLogger}
	sdk, err := d.Dial(ctx, Key{
		HostPort: ts.HostPort, TemporalNamespace: ts.Namespace,
		Namespace: ns, Secret: secret.Name, SecretKey: "api-key", Plaintext: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	describe := func() error {
		_, err := sdk.WorkerDeploymentClient().GetHandle("finale-absent").Describe(ctx, sdkclient.WorkerDeploymentDescribeOptions{})
		return err
	}
	if got := errclass.Of(ctx, describe()); got != errclass.NotFound {
		t.Fatalf("with the Secret: %s, want NotFound (the call reached the server)", got)
	}

	if err := c.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	err = describe()
	elapsed := time.Since(t0)
	if got := errclass.Of(ctx, err); got != errclass.Auth {
		t.Errorf("without the Secret: %s after %s (%v), want Auth", got, elapsed.Round(time.Millisecond), err)
	}
	if bound := 2 * time.Second; elapsed > bound {
		t.Errorf("without the Secret the call took %s, want at most %s (the SDK's own timeout is 10 s)", elapsed.Round(time.Millisecond), bound)
	}
}
