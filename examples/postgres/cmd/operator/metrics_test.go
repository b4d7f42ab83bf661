package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
)

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// token returns a bound token of ServiceAccount ns/name, created for it.
func token(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// The metrics endpoint, run as the Deployment runs it (the manifests'
// flags and RBAC, the operator's ServiceAccount), refuses a scrape without
// a token and one whose subject may not read metrics, and serves a
// ServiceAccount bound to finale-postgres-metrics-reader; it speaks HTTPS
// only.
func TestMetricsNeedAnAuthorizedToken(t *testing.T) {
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t, testenv.Scheme())
	applyManifests(t, c)
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	startOperator(t, impersonating(t, cp, manifestNamespace, manifestSA), manifestNamespace, nil,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port), "--health-probe-bind-address=0")

	ns := testenv.Namespace(t, c)
	scraper := token(t, cs, ns, "prometheus")
	stranger := token(t, cs, ns, "stranger")
	bind := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-prometheus"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "finale-postgres-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "prometheus"}},
	}
	if err := c.Create(t.Context(), bind); err != nil {
		t.Fatal(err)
	}

	// The certificate is self-signed (no --metrics-cert-path): a real
	// scraper is given the CA; this test checks who is let in, not the
	// chain.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	scrape := func(ctx context.Context, bearer string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	err = controlplane.WaitFor(t.Context(), 90*time.Second, "metrics server up", func(ctx context.Context) (bool, error) {
		_, _, err := scrape(ctx, "")
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	cases := map[string]struct {
		bearer string
		want   int
	}{
		"no token": {want: http.StatusUnauthorized},
		// The TokenReview reports an error for a malformed token, which
		// controller-runtime's filter answers with 500: refused all the same.
		"a token the API server rejects":       {bearer: "not-a-token", want: http.StatusInternalServerError},
		"a ServiceAccount not bound to read":   {bearer: stranger, want: http.StatusForbidden},
		"a ServiceAccount bound to the reader": {bearer: scraper, want: http.StatusOK},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// The binding may take a moment to reach the authorizer's
			// cache; only the allowed case can need it.
			var code int
			var body string
			err := controlplane.WaitFor(t.Context(), 30*time.Second, "scrape answered "+strconv.Itoa(tc.want), func(ctx context.Context) (bool, error) {
				var err error
				code, body, err = scrape(ctx, tc.bearer)
				return err == nil && (code == tc.want || tc.want != http.StatusOK), err
			})
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Fatalf("status %d, want %d; body %.200q", code, tc.want, body)
			}
			if tc.want == http.StatusOK && !strings.Contains(body, "# TYPE ") {
				t.Errorf("scrape body is no Prometheus exposition: %.300q", body)
			}
			if tc.want != http.StatusOK && strings.Contains(body, "# TYPE ") {
				t.Errorf("a refused scrape got metrics: %.300q", body)
			}
		})
	}

	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://127.0.0.1:" + strconv.Itoa(port) + "/metrics")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "# TYPE ") {
			t.Errorf("plain HTTP scrape: status %d, body %.200q; want no metrics", resp.StatusCode, body)
		}
	}
}
