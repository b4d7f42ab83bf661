package keyclient_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/examples/keys/keyclient"
	"github.com/finale-dev/finale/examples/keys/service"
)

func TestNewRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ url, token string }{
		"no scheme":     {url: "127.0.0.1:8080", token: "t"},
		"ftp":           {url: "ftp://127.0.0.1", token: "t"},
		"user":          {url: "http://u:p@127.0.0.1", token: "t"},
		"query":         {url: "http://127.0.0.1/?x=1", token: "t"},
		"fragment":      {url: "http://127.0.0.1/#x", token: "t"},
		"empty token":   {url: "http://127.0.0.1", token: ""},
		"token with nl": {url: "http://127.0.0.1", token: "a\nb"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := keyclient.New(tc.url, tc.token, keyclient.Options{}); !errors.Is(err, keyclient.ErrConfig) {
				t.Errorf("New(%q) = %v, want ErrConfig", tc.url, err)
			}
		})
	}
}

// A service that answers with a redirect does not get the client to send
// its bearer token anywhere else: the redirect is an error.
func TestRedirectNotFollowed(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
	}))
	defer other.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	c, err := keyclient.New(redirecting.URL, "secret-token", keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.List(t.Context(), "t")
	if e := (*keyclient.Error)(nil); !errors.As(err, &e) || e.Status != http.StatusTemporaryRedirect {
		t.Errorf("List through a redirect = %v, want an *Error with status 307", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests, want 0", n)
	}
}

// A service that is gone is a Transport error (the pool evicts the
// client); one that answers something other than the service's JSON is
// an error naming the call, not a panic or a silent empty answer.
func TestFailures(t *testing.T) {
	s, err := service.Start("", service.Options{Token: "test-token-0123456789", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := keyclient.New(s.URL, "test-token-0123456789", keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = c.List(t.Context(), "t")
	if got := errclass.Default.Classify(t.Context(), err); got != errclass.Transport {
		t.Errorf("a closed service: %v classifies as %s, want Transport", err, got)
	}

	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("<html>not the key service</html>"))
	}))
	defer garbage.Close()
	g, err := keyclient.New(garbage.URL, "t", keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.List(t.Context(), "t"); err == nil || !strings.Contains(err.Error(), "GET /v1/keys") {
		t.Errorf("a non-JSON answer = %v, want an error naming GET /v1/keys", err)
	}
}
