package keyclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/finale-dev/finale/examples/keys/service"
	"github.com/finale-dev/finale/ledger"
)

// ErrNotEnrolled is returned by Prove when the service holds no identity
// for the question's operator key ID and the question did not enrol one:
// a service reset, or a copy of its data without its identities. It is a
// ledger.ErrNotProven: such a service cannot prove any deployment.
var ErrNotEnrolled = fmt.Errorf("%w: the key service holds no identity enrolled for this operator key (reset, or a copy of its data)", ledger.ErrNotProven)

// ErrConfig is wrapped by every error of New.
var ErrConfig = errors.New("keyclient: invalid configuration")

// maxAnswerBytes bounds what is read of an answer.
const maxAnswerBytes = 4 << 20

// Error is an answer of the service that is not a success. It carries the
// HTTP status (StatusCode, which package errclass reads: a 401 is Auth, a
// 503 Transport).
type Error struct {
	Method, Path string
	Status       int
	// Code and Message are the service's, when the body was its Error.
	Code, Message string
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("key service: %s %s: %d %s: %s", e.Method, e.Path, e.Status, e.Code, msg)
}

// StatusCode is the HTTP status, for errclass.
func (e *Error) StatusCode() int { return e.Status }

// Options tune New. The zero value is usable.
type Options struct {
	// Transport carries the requests; nil is a clone of
	// http.DefaultTransport, one per Client, so that closing a Client
	// closes its connections and nothing else.
	Transport http.RoundTripper
}

// Client calls one key service with one bearer token. It is safe for
// concurrent use. It never follows a redirect: the token goes to the URL
// it was made with and nowhere else.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// New returns a client of the service at baseURL (http or https, no user,
// query or fragment) that authenticates with token.
func New(baseURL, token string, o Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("%w: URL: %w", ErrConfig, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: URL %q must be http:// or https:// with a host and no user, query or fragment", ErrConfig, baseURL)
	}
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return nil, fmt.Errorf("%w: the token must be non-empty and hold no white space", ErrConfig)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	rt := o.Transport
	if rt == nil {
		rt = http.DefaultTransport.(*http.Transport).Clone()
	}
	return &Client{base: u, token: token, http: &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// Close closes the client's idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// Create creates a key carrying tag and returns it, with the ID the
// service gave it.
func (c *Client) Create(ctx context.Context, tag string, spec service.KeySpec) (service.Key, error) {
	var k service.Key
	err := c.do(ctx, http.MethodPost, "/v1/keys", nil, service.NewKey{Tag: tag, KeySpec: spec}, &k, http.StatusCreated)
	return k, err
}

// List returns the keys carrying tag.
func (c *Client) List(ctx context.Context, tag string) ([]service.Key, error) {
	var l service.KeyList
	err := c.do(ctx, http.MethodGet, "/v1/keys", url.Values{"tag": {tag}}, nil, &l, http.StatusOK)
	return l.Keys, err
}

// Update sets spec on the key id while it carries tag; a key that does not
// is an *Error with status 404.
func (c *Client) Update(ctx context.Context, id, tag string, spec service.KeySpec) error {
	return c.do(ctx, http.MethodPut, "/v1/keys/"+url.PathEscape(id), url.Values{"tag": {tag}}, spec, nil, http.StatusOK)
}

// Delete deletes the key id only if it carries tag. No key id carrying tag
// is success.
func (c *Client) Delete(ctx context.Context, id, tag string) error {
	return c.do(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), url.Values{"tag": {tag}}, nil, nil, http.StatusNoContent)
}

// Get returns the key id, whatever its tag; a missing key is an *Error
// with status 404.
func (c *Client) Get(ctx context.Context, id string) (service.Key, error) {
	var k service.Key
	err := c.do(ctx, http.MethodGet, "/v1/keys/"+url.PathEscape(id), nil, nil, &k, http.StatusOK)
	return k, err
}

// DeleteByID deletes the key id whatever it carries: the only delete of a
// service in service.ModeIDOnly. A missing key is an *Error with status
// 404.
func (c *Client) DeleteByID(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), nil, nil, nil, http.StatusNoContent)
}

// ReadThenDelete is Delete for a service in service.ModeIDOnly, as the G2
// seed deletes: it reads the key id (Get) and deletes it by ID
// (DeleteByID) only if it carried tag. No key id carrying tag, or a key
// gone by the delete, is success, as for Delete.
//
// It is two requests, and the service checks nothing in the second:
// a key that moves to another tag between them, or a delete that reaches
// another backend than the read, is deleted (or missed) unseen. Delete
// checks the tag in the request that deletes.
func (c *Client) ReadThenDelete(ctx context.Context, id, tag string) error {
	k, err := c.Get(ctx, id)
	if err == nil && k.Tag != tag {
		return nil // someone else's key
	}
	if err == nil {
		err = c.DeleteByID(ctx, id)
	}
	if e := (*Error)(nil); errors.As(err, &e) && e.Status == http.StatusNotFound {
		return nil
	}
	return err
}

// Retag moves the key id from tag from to tag to; a key carrying neither
// is left alone.
func (c *Client) Retag(ctx context.Context, id, from, to string) error {
	return c.do(ctx, http.MethodPost, "/v1/keys/"+url.PathEscape(id)+"/retag", nil, service.Retag{From: from, To: to}, nil, http.StatusNoContent)
}

// Identity returns the service's deployment ID, as it claims it: for
// display and for checking that the service answers. Only Prove proves it.
func (c *Client) Identity(ctx context.Context) (string, error) {
	var id service.Identity
	err := c.do(ctx, http.MethodGet, "/v1/identity", nil, nil, &id, http.StatusOK)
	return id.Deployment, err
}

// Prove puts q to the service's identity endpoint, which answers it where
// the identity's token is stored (enrolling q.Enroll first when it holds
// none for q.KeyID): one round trip, never a cache. A service without an
// identity for q.KeyID answers ErrNotEnrolled.
func (c *Client) Prove(ctx context.Context, q ledger.Question) (ledger.Answer, error) {
	var a service.ProveResponse
	err := c.do(ctx, http.MethodPost, "/v1/identity/prove", nil, service.NewProveRequest(q), &a, http.StatusOK)
	if e := (*Error)(nil); errors.As(err, &e) && e.Code == service.CodeNotEnrolled {
		return ledger.Answer{}, fmt.Errorf("%w: %w", ErrNotEnrolled, err)
	}
	return a.Answer(), err
}

func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any, want int) error {
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("key service: %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("key service: %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("key service: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("key service: %s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode != want {
		e := &Error{Method: method, Path: path, Status: resp.StatusCode}
		var se service.Error
		if json.Unmarshal(b, &se) == nil {
			e.Code, e.Message = se.Code, se.Message
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("key service: %s %s: the answer is not the JSON expected: %w", method, path, err)
	}
	return nil
}
