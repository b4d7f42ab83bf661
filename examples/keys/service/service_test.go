package service_test

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/examples/keys/keyclient"
	"github.com/finale-dev/finale/examples/keys/service"
	"github.com/finale-dev/finale/ledger"
)

const token = "test-token-0123456789"

func start(t *testing.T, o service.Options) *service.Server {
	t.Helper()
	if o.Token == "" {
		o.Token = token
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s, err := service.Start("", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func clientOf(t *testing.T, s *service.Server, tok string) *keyclient.Client {
	t.Helper()
	c, err := keyclient.New(s.URL, tok, keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func statusOf(err error) int {
	if e := (*keyclient.Error)(nil); errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// Keys are listed, changed and deleted by tag: a call naming another tag
// changes nothing, and a delete of a key that does not carry the tag is
// success that leaves the key alone.
func TestKeysByTag(t *testing.T) {
	s := start(t, service.Options{})
	c := clientOf(t, s, token)
	ctx := t.Context()
	a, err := c.Create(ctx, "tag-a", service.KeySpec{Name: "ci", Scopes: []string{"write", "read", "write"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"read", "write"}, a.Scopes); diff != "" {
		t.Errorf("scopes are a sorted set (-want +got):\n%s", diff)
	}
	b, err := c.Create(ctx, "tag-b", service.KeySpec{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == b.ID || !strings.HasPrefix(a.ID, "ak_") {
		t.Fatalf("IDs %q and %q: want two distinct service-made IDs", a.ID, b.ID)
	}

	got, err := c.List(ctx, "tag-a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]service.Key{a}, got); diff != "" {
		t.Errorf("list by tag-a (-want +got):\n%s", diff)
	}
	if !got[0].Matches(service.KeySpec{Name: "ci", Scopes: []string{"write", "read"}}) {
		t.Error("Matches compares scopes as a set; it did not")
	}

	if err := c.Update(ctx, a.ID, "tag-b", service.KeySpec{Name: "stolen"}); statusOf(err) != http.StatusNotFound {
		t.Errorf("update under another tag = %v, want a 404", err)
	}
	if err := c.Update(ctx, a.ID, "tag-a", service.KeySpec{Name: "ci-2", Scopes: []string{"read"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, a.ID, "tag-b"); err != nil {
		t.Errorf("delete under another tag = %v, want success (no key %s carries tag-b)", err, a.ID)
	}
	if err := c.Delete(ctx, "ak_missing", "tag-a"); err != nil {
		t.Errorf("delete of a missing key = %v, want success", err)
	}
	want := []service.Key{{ID: a.ID, Tag: "tag-a", KeySpec: service.KeySpec{Name: "ci-2", Scopes: []string{"read"}}}, b}
	if diff := cmp.Diff(want, s.Keys(), sortKeys); diff != "" {
		t.Errorf("keys after the refused calls (-want +got):\n%s", diff)
	}

	if err := c.Retag(ctx, a.ID, "tag-b", "tag-c"); err != nil {
		t.Fatal(err)
	}
	if err := c.Retag(ctx, a.ID, "tag-a", "tag-c"); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.List(ctx, "tag-c"); len(got) != 1 || got[0].ID != a.ID {
		t.Errorf("after retag, tag-c lists %v, want only %s", got, a.ID)
	}
	if err := c.Delete(ctx, a.ID, "tag-c"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]service.Key{b}, s.Keys()); diff != "" {
		t.Errorf("keys at the end (-want +got):\n%s", diff)
	}
}

var sortKeys = cmp.Transformer("sorted", func(ks []service.Key) map[string]service.Key {
	m := map[string]service.Key{}
	for _, k := range ks {
		m[k.ID] = k
	}
	return m
})

func TestRefusals(t *testing.T) {
	s := start(t, service.Options{})
	ctx := t.Context()
	good := clientOf(t, s, token)
	for name, tc := range map[string]struct {
		call  func(c *keyclient.Client) error
		token string
		want  int
		class errclass.Class
	}{
		"no token":            {token: "wrong-token-0123456789", call: func(c *keyclient.Client) error { _, err := c.List(ctx, "t"); return err }, want: http.StatusUnauthorized, class: errclass.Auth},
		"create without tag":  {call: func(c *keyclient.Client) error { _, err := c.Create(ctx, "", service.KeySpec{Name: "x"}); return err }, want: http.StatusBadRequest, class: errclass.Invalid},
		"create without name": {call: func(c *keyclient.Client) error { _, err := c.Create(ctx, "t", service.KeySpec{}); return err }, want: http.StatusBadRequest, class: errclass.Invalid},
		"long scope": {call: func(c *keyclient.Client) error {
			_, err := c.Create(ctx, "t", service.KeySpec{Name: "x", Scopes: []string{strings.Repeat("s", service.MaxScopeLength+1)}})
			return err
		}, want: http.StatusBadRequest, class: errclass.Invalid},
		"list without tag":   {call: func(c *keyclient.Client) error { _, err := c.List(ctx, ""); return err }, want: http.StatusBadRequest, class: errclass.Invalid},
		"delete without tag": {call: func(c *keyclient.Client) error { return c.Delete(ctx, "ak_x", "") }, want: http.StatusBadRequest, class: errclass.Invalid},
		"prove without challenge": {call: func(c *keyclient.Client) error {
			_, err := c.Prove(ctx, ledger.Question{KeyID: "k"})
			return err
		}, want: http.StatusBadRequest, class: errclass.Invalid},
	} {
		t.Run(name, func(t *testing.T) {
			c := good
			if tc.token != "" {
				c = clientOf(t, s, tc.token)
			}
			err := tc.call(c)
			if got := statusOf(err); got != tc.want {
				t.Fatalf("got %v (status %d), want status %d", err, got, tc.want)
			}
			if got := errclass.Default.Classify(ctx, err); got != tc.class {
				t.Errorf("class %s, want %s", got, tc.class)
			}
		})
	}
	if n := len(s.Keys()); n != 0 {
		t.Errorf("%d keys after refused calls, want 0", n)
	}
}

// The identity endpoint answers a ledger.Question with ledger.Respond over
// the enrolled token, computed in the service; it enrols once, and a
// later enrolment never replaces the identity.
func TestProve(t *testing.T) {
	s := start(t, service.Options{})
	c := clientOf(t, s, token)
	ctx := t.Context()
	opKey := ledger.GenerateKey()
	salt := "0123456789abcdef"

	q := ledger.Question{KeyID: opKey.ID(), Challenge: "c1", Tag: "tag-a"}
	if _, err := c.Prove(ctx, q); !errors.Is(err, keyclient.ErrNotEnrolled) || !errors.Is(err, ledger.ErrNotProven) {
		t.Fatalf("Prove before enrolment = %v, want ErrNotEnrolled, a ledger.ErrNotProven", err)
	}
	k, err := c.Create(ctx, "tag-a", service.KeySpec{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	q.Enroll = &ledger.Enrollment{Salt: salt, Token: opKey.Token(salt)}
	a, err := c.Prove(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Answer{Deployment: s.Deployment(), Salt: salt, Tagged: []string{k.ID}}
	want.Response = ledger.Respond(opKey.Token(salt), ledger.Question{KeyID: q.KeyID, Challenge: q.Challenge, Tag: q.Tag}, want.Deployment, salt, want.Tagged)
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}

	// Enrolling again with another salt and token changes nothing.
	q2 := ledger.Question{KeyID: opKey.ID(), Challenge: "c2", Enroll: &ledger.Enrollment{Salt: "fedcba9876543210", Token: "forged"}}
	a2, err := c.Prove(ctx, q2)
	if err != nil {
		t.Fatal(err)
	}
	if a2.Salt != salt || a2.Response != ledger.Respond(opKey.Token(salt), ledger.Question{KeyID: q2.KeyID, Challenge: "c2"}, s.Deployment(), salt, nil) {
		t.Errorf("a second enrolment replaced the identity: answer %+v", a2)
	}
	if len(a2.Tagged) != 0 {
		t.Errorf("a question without a tag listed %v", a2.Tagged)
	}

	// Another operator key has an identity of its own, or none.
	other := ledger.GenerateKey()
	if _, err := c.Prove(ctx, ledger.Question{KeyID: other.ID(), Challenge: "c3"}); !errors.Is(err, keyclient.ErrNotEnrolled) {
		t.Errorf("another key's question = %v, want ErrNotEnrolled", err)
	}
	if id, err := c.Identity(ctx); err != nil || id != s.Deployment() {
		t.Errorf("Identity = %q, %v; want %q", id, err, s.Deployment())
	}
}

// A restart on the same directories is the same deployment with the same
// keys and identities. A copy of the data without the identities (or the
// service reset to a new identity store) has the deployment ID and the
// keys, and cannot prove the deployment: it has no token, and an
// enrolment there makes another salt, which no record names.
func TestRestartAndCopy(t *testing.T) {
	dir, ids := t.TempDir(), t.TempDir()
	ctx := t.Context()
	opKey := ledger.GenerateKey()
	salt := "0123456789abcdef"
	enrol := &ledger.Enrollment{Salt: salt, Token: opKey.Token(salt)}

	s := start(t, service.Options{Dir: dir, IdentityDir: ids})
	c := clientOf(t, s, token)
	k, err := c.Create(ctx, "tag-a", service.KeySpec{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prove(ctx, ledger.Question{KeyID: opKey.ID(), Challenge: "c0", Enroll: enrol}); err != nil {
		t.Fatal(err)
	}
	dep := s.Deployment()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	restarted := start(t, service.Options{Dir: dir, IdentityDir: ids})
	rc := clientOf(t, restarted, token)
	if restarted.Deployment() != dep {
		t.Errorf("restart changed the deployment from %s to %s", dep, restarted.Deployment())
	}
	if a, err := rc.Prove(ctx, ledger.Question{KeyID: opKey.ID(), Challenge: "c1", Tag: "tag-a"}); err != nil || a.Salt != salt || len(a.Tagged) != 1 {
		t.Errorf("restarted Prove = %+v, %v; want salt %s and key %s", a, err, salt, k.ID)
	}

	cp := t.TempDir()
	if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	copied := start(t, service.Options{Dir: cp, IdentityDir: t.TempDir()})
	cc := clientOf(t, copied, token)
	if copied.Deployment() != dep || len(copied.Keys()) != 1 {
		t.Fatalf("the copy has deployment %s and %d keys; want %s and 1", copied.Deployment(), len(copied.Keys()), dep)
	}
	if _, err := cc.Prove(ctx, ledger.Question{KeyID: opKey.ID(), Challenge: "c2", Tag: "tag-a"}); !errors.Is(err, ledger.ErrNotProven) {
		t.Errorf("the copy's Prove = %v, want a ledger.ErrNotProven", err)
	}
}

func TestNewRefuses(t *testing.T) {
	withKeys := t.TempDir()
	if err := os.WriteFile(filepath.Join(withKeys, service.KeysFile), []byte(`{"keys":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		o    service.Options
		says string
	}{
		"short token":               {o: service.Options{Token: "short", Dir: t.TempDir()}, says: "need at least 16"},
		"no directory":              {o: service.Options{Token: token}, says: "Dir is required"},
		"keys without a deployment": {o: service.Options{Token: token, Dir: withKeys}, says: "holds keys but no deployment"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := service.New(tc.o); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("New = %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:0":    true,
		"[::1]:8080":     true,
		"localhost:80":   true,
		"0.0.0.0:8080":   false,
		"10.0.0.1:8080":  false,
		"example.com:80": false,
		"127.0.0.1":      false,
	} {
		err := service.CheckLoopback(addr)
		if (err == nil) != ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
	if _, err := service.Start("0.0.0.0:0", service.Options{Token: token, Dir: t.TempDir()}); !errors.Is(err, service.ErrNotLoopback) {
		t.Errorf("Start on 0.0.0.0 = %v, want ErrNotLoopback", err)
	}
}

// In ModeIDOnly the service proves nothing (the challenge endpoint is 501,
// an Invalid error the operator never takes for an answer) and deletes by
// ID alone: a delete naming a tag is refused, a delete by ID removes the
// key whatever it carries, a missing key is a 404. In the default mode a
// delete without a tag is refused, so neither mode's client can delete
// through the other's API by mistake.
func TestIDOnlyMode(t *testing.T) {
	s := start(t, service.Options{Mode: service.ModeIDOnly})
	c := clientOf(t, s, token)
	ctx := t.Context()
	if s.Mode() != service.ModeIDOnly {
		t.Fatalf("Mode() = %q, want %q", s.Mode(), service.ModeIDOnly)
	}
	_, err := c.Prove(ctx, ledger.Question{KeyID: "k", Challenge: "c", Enroll: &ledger.Enrollment{Salt: "s", Token: "t"}})
	if statusOf(err) != http.StatusNotImplemented || errclass.Default.Classify(ctx, err) != errclass.Invalid {
		t.Errorf("Prove in id-only mode = %v, want a 501 classified Invalid", err)
	}
	if id, err := c.Identity(ctx); err != nil || id != s.Deployment() {
		t.Errorf("Identity = %q, %v; want %q", id, err, s.Deployment())
	}

	mine, err := c.Create(ctx, "tag-a", service.KeySpec{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := c.Create(ctx, "tag-b", service.KeySpec{Name: "theirs"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, theirs.ID); err != nil || !cmp.Equal(got, theirs) {
		t.Errorf("Get(%s) = %+v, %v; want %+v", theirs.ID, got, err, theirs)
	}
	if _, err := c.Get(ctx, "ak_missing"); statusOf(err) != http.StatusNotFound {
		t.Errorf("Get of a missing key = %v, want a 404", err)
	}
	if err := c.Delete(ctx, theirs.ID, "tag-b"); statusOf(err) != http.StatusBadRequest {
		t.Errorf("a delete naming a tag = %v, want a 400: this mode has no conditional delete", err)
	}
	if err := c.ReadThenDelete(ctx, theirs.ID, "tag-a"); err != nil {
		t.Errorf("ReadThenDelete of a key with another tag = %v, want success that leaves it", err)
	}
	if err := c.ReadThenDelete(ctx, "ak_missing", "tag-a"); err != nil {
		t.Errorf("ReadThenDelete of a missing key = %v, want success", err)
	}
	if diff := cmp.Diff([]service.Key{mine, theirs}, s.Keys(), sortKeys); diff != "" {
		t.Errorf("keys after the calls that must leave them (-want +got):\n%s", diff)
	}
	// The delete itself checks nothing: it removes another tag's key.
	if err := c.DeleteByID(ctx, theirs.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteByID(ctx, theirs.ID); statusOf(err) != http.StatusNotFound {
		t.Errorf("DeleteByID of a deleted key = %v, want a 404", err)
	}
	if err := c.ReadThenDelete(ctx, mine.ID, "tag-a"); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Keys()); n != 0 {
		t.Errorf("%d keys left, want 0", n)
	}

	strong := start(t, service.Options{})
	sc := clientOf(t, strong, token)
	k, err := sc.Create(ctx, "tag-a", service.KeySpec{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.DeleteByID(ctx, k.ID); statusOf(err) != http.StatusBadRequest {
		t.Errorf("DeleteByID in the default mode = %v, want a 400: it deletes only by tag", err)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]service.Mode{"": service.ModeChallenge, "challenge": service.ModeChallenge, "id-only": service.ModeIDOnly, "seed": ""} {
		got, err := service.ParseMode(in)
		if got != want || (err != nil) != (want == "") || (err != nil && !errors.Is(err, service.ErrMode)) {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// A connection a client opened and sent no call on (an HTTP transport
// dials ahead and may park the connection unused) is no call in flight:
// Close closes it and succeeds, instead of waiting CloseGrace for it and
// failing.
func TestCloseWithAnUnusedConnection(t *testing.T) {
	s, _ := startAndDial(t)
	// The server accepts connections one after the other and tracks each
	// before it accepts the next: once a call on a second connection is
	// answered, the first is tracked, and Shutdown must deal with it.
	resp, err := http.Get(s.URL + "/v1/identity")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v, want nil: the connection carried no call", err)
	}
}

// A call still in flight when CloseGrace ends is cut off and reported, and
// Close returns only once its handler has: nothing the closed service
// does can follow Close, such as writing the keys after a restart on the
// same directory.
func TestCloseCutsACallPastTheGrace(t *testing.T) {
	s, conn := startAndDial(t)
	// The body never comes. The server answers "100 Continue" when the
	// handler starts reading it: the call is in flight from then on.
	req := "POST /v1/keys HTTP/1.1\r\nHost: keys\r\nAuthorization: Bearer " + token +
		"\r\nContent-Type: application/json\r\nContent-Length: 64\r\nExpect: 100-continue\r\n\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("read %q (%v), want the server's 100 Continue", line, err)
	}
	if err := s.Close(); !errors.Is(err, service.ErrCallsCut) {
		t.Fatalf("Close = %v, want a service.ErrCallsCut", err)
	}
	if got := len(s.Keys()); got != 0 {
		t.Errorf("the cut call created %d keys, want none", got)
	}
}

// startAndDial starts a service that the test closes itself (start's
// cleanup would report what Close returns) and opens a connection to it.
func startAndDial(t *testing.T) (*service.Server, net.Conn) {
	t.Helper()
	s, err := service.Start("", service.Options{Token: token, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		_ = s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return s, conn
}
