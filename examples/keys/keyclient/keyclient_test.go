package keyclient_test

import (
	"context"
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

// beforeDelete is a transport that runs change just before it sends the
// first DELETE: a change that lands between a read and a delete.
type beforeDelete struct {
	next   http.RoundTripper
	change func(*http.Request) error
	once   atomic.Bool
}

func (b *beforeDelete) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodDelete && b.once.CompareAndSwap(false, true) {
		if err := b.change(r); err != nil {
			return nil, err
		}
	}
	return b.next.RoundTrip(r)
}

// The window of a read-then-delete (service.ModeIDOnly, the G2 seed's
// shape): a key that changes hands after the read (moved to another
// owner's tag: a restored owner adopting it) and before the delete is
// deleted, because the delete by ID checks nothing. The default mode's
// delete names the tag in the request that deletes, and the service checks
// it under the same lock as the delete: the same change leaves the key
// with its new owner.
func TestDeleteWindow(t *testing.T) {
	const tok = "test-token-0123456789"
	for name, tc := range map[string]struct {
		mode     service.Mode
		del      func(c *keyclient.Client) func(ctx context.Context, id, tag string) error
		wantKept bool
	}{
		"challenge: Delete, one request":        {mode: service.ModeChallenge, del: func(c *keyclient.Client) func(context.Context, string, string) error { return c.Delete }, wantKept: true},
		"id-only: ReadThenDelete, two requests": {mode: service.ModeIDOnly, del: func(c *keyclient.Client) func(context.Context, string, string) error { return c.ReadThenDelete }, wantKept: false},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := service.Start("", service.Options{Token: tok, Dir: t.TempDir(), Mode: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			other, err := keyclient.New(s.URL, tok, keyclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			k, err := other.Create(t.Context(), "old-owner", service.KeySpec{Name: "k"})
			if err != nil {
				t.Fatal(err)
			}
			var sawRead atomic.Bool
			tr := &beforeDelete{next: http.DefaultTransport.(*http.Transport).Clone(), change: func(r *http.Request) error {
				return other.Retag(r.Context(), k.ID, "old-owner", "new-owner")
			}}
			c, err := keyclient.New(s.URL, tok, keyclient.Options{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodGet {
					sawRead.Store(true)
				}
				return tr.RoundTrip(r)
			})})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()

			if err := tc.del(c)(t.Context(), k.ID, "old-owner"); err != nil {
				t.Fatal(err)
			}
			if !tr.once.Load() {
				t.Fatal("no DELETE was sent: the change never landed in the window")
			}
			if tc.mode == service.ModeIDOnly && !sawRead.Load() {
				t.Fatal("the id-only delete sent no read first")
			}
			keys := s.Keys()
			kept := len(keys) == 1 && keys[0].Tag == "new-owner"
			if kept != tc.wantKept {
				t.Errorf("after the delete the service holds %v; the new owner's key kept = %v, want %v", keys, kept, tc.wantKept)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
