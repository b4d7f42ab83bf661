package errclass_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/finale-dev/finale/errclass"
)

// httpError is how many HTTP SDKs expose a response code.
type httpError struct{ code int }

func (e *httpError) Error() string   { return fmt.Sprintf("HTTP %d", e.code) }
func (e *httpError) StatusCode() int { return e.code }

// sqlError is how PostgreSQL drivers expose a server error's SQLSTATE
// (pgx's *pgconn.PgError and lib/pq's *pq.Error; the real pgx values are
// classified in examples/postgres/stacktest/errclass).
type sqlError struct{ code string }

func (e *sqlError) Error() string    { return "SQLSTATE " + e.code }
func (e *sqlError) SQLState() string { return e.code }

// statusError keeps its gRPC status behind Status(), not GRPCStatus(), as
// Temporal's serviceerror types do (the real ones are classified in
// examples/temporal/stacktest).
type statusError struct{ s *status.Status }

func (e *statusError) Error() string          { return "status error" }
func (e *statusError) Status() *status.Status { return e.s }

var gr = schema.GroupResource{Group: "g1.test.finale.dev", Resource: "things"}

// refusedAddr is a loopback address with nothing listening.
func refusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// realNetErrors produces errors from real sockets on loopback.
func realNetErrors(t *testing.T) map[string]error {
	t.Helper()
	out := map[string]error{}

	_, err := net.Dial("tcp", refusedAddr(t))
	out["dial refused"] = err

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := <-accepted

	if err := c.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err = c.Read(make([]byte, 1))
	out["read timeout"] = err
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	// The peer resets: SO_LINGER 0 makes Close send RST.
	if err := srv.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	_, err = c.Read(make([]byte, 1))
	out["read after peer reset"] = err

	_, err = c.Read(make([]byte, 1))
	if err == nil {
		t.Fatal("read on reset connection succeeded")
	}
	c.Close()
	_, err = c.Read(make([]byte, 1))
	out["read on closed conn"] = err

	_, err = io.ReadFull(io.LimitReader(zeroReader{}, 1), make([]byte, 4))
	out["short read"] = err
	return out
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// x509Error is a real verification failure: a self-signed certificate
// checked against an empty pool.
func x509Error(t *testing.T) error {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "self"},
		NotBefore: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), DNSNames: []string{"self"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: x509.NewCertPool(), DNSName: "self"})
	if err == nil {
		t.Fatal("self-signed certificate verified against an empty pool")
	}
	return err
}

func TestClassify(t *testing.T) {
	live := t.Context()
	netErrs := realNetErrors(t)

	terminating := apierrors.NewForbidden(gr, "x", errors.New("namespace is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: "NamespaceTerminating"}}

	cases := map[string]struct {
		err  error
		want errclass.Class
	}{
		"nil":                           {nil, ""},
		"plain error":                   {errors.New("boom"), errclass.Unknown},
		"context canceled":              {context.Canceled, errclass.Canceled},
		"own deadline, caller live":     {context.DeadlineExceeded, errclass.Transport},
		"os deadline":                   {os.ErrDeadlineExceeded, errclass.Transport},
		"grpc unavailable":              {status.Error(codes.Unavailable, "x"), errclass.Transport},
		"grpc deadline":                 {status.Error(codes.DeadlineExceeded, "x"), errclass.Transport},
		"grpc unauthenticated":          {status.Error(codes.Unauthenticated, "x"), errclass.Auth},
		"grpc permission denied":        {status.Error(codes.PermissionDenied, "x"), errclass.Auth},
		"grpc not found":                {status.Error(codes.NotFound, "x"), errclass.NotFound},
		"grpc already exists":           {status.Error(codes.AlreadyExists, "x"), errclass.Conflict},
		"grpc aborted":                  {status.Error(codes.Aborted, "x"), errclass.Conflict},
		"grpc failed precondition":      {status.Error(codes.FailedPrecondition, "x"), errclass.Conflict},
		"grpc resource exhausted":       {status.Error(codes.ResourceExhausted, "x"), errclass.Throttled},
		"grpc invalid argument":         {status.Error(codes.InvalidArgument, "x"), errclass.Invalid},
		"grpc canceled":                 {status.Error(codes.Canceled, "x"), errclass.Canceled},
		"grpc internal":                 {status.Error(codes.Internal, "x"), errclass.Unknown},
		"status() deadline exceeded":    {&statusError{status.New(codes.DeadlineExceeded, "x")}, errclass.Transport},
		"status() not found":            {&statusError{status.New(codes.NotFound, "x")}, errclass.NotFound},
		"status() nil":                  {&statusError{}, errclass.Unknown},
		"timeout() true":                {&timeoutError{timeout: true}, errclass.Transport},
		"timeout() false":               {&timeoutError{}, errclass.Unknown},
		"dial refused":                  {netErrs["dial refused"], errclass.Transport},
		"read timeout":                  {netErrs["read timeout"], errclass.Transport},
		"read after peer reset":         {netErrs["read after peer reset"], errclass.Transport},
		"read on closed conn":           {netErrs["read on closed conn"], errclass.Transport},
		"unexpected EOF":                {netErrs["short read"], errclass.Transport},
		"EOF":                           {io.EOF, errclass.Transport},
		"ECONNRESET":                    {&os.SyscallError{Syscall: "write", Err: syscall.ECONNRESET}, errclass.Transport},
		"EPIPE":                         {&net.OpError{Op: "write", Net: "tcp", Err: &os.SyscallError{Syscall: "write", Err: syscall.EPIPE}}, errclass.Transport},
		"DNS not found":                 {&net.DNSError{Err: "no such host", Name: "db.invalid", IsNotFound: true}, errclass.Transport},
		"DNS timeout":                   {&net.DNSError{Err: "i/o timeout", Name: "db.example", IsTimeout: true}, errclass.Transport},
		"x509 unknown authority":        {x509Error(t), errclass.Identity},
		"x509 hostname":                 {x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}, errclass.Identity},
		"x509 expired":                  {x509.CertificateInvalidError{Cert: &x509.Certificate{}, Reason: x509.Expired}, errclass.Identity},
		"tls verification":              {&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, errclass.Identity},
		"no TLS where required":         {fmt.Errorf("connect: %w: %w", errclass.ErrNoTLS, errors.New("server refused TLS connection")), errclass.Identity},
		"tls alert":                     {tls.AlertError(42), errclass.Auth},
		"tls record header":             {tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, errclass.Transport},
		"http 401":                      {&httpError{http.StatusUnauthorized}, errclass.Auth},
		"http 403":                      {&httpError{http.StatusForbidden}, errclass.Auth},
		"http 404":                      {&httpError{http.StatusNotFound}, errclass.NotFound},
		"http 410":                      {&httpError{http.StatusGone}, errclass.NotFound},
		"http 409":                      {&httpError{http.StatusConflict}, errclass.Conflict},
		"http 429":                      {&httpError{http.StatusTooManyRequests}, errclass.Throttled},
		"http 502":                      {&httpError{http.StatusBadGateway}, errclass.Transport},
		"http 503":                      {&httpError{http.StatusServiceUnavailable}, errclass.Transport},
		"http 504":                      {&httpError{http.StatusGatewayTimeout}, errclass.Transport},
		"http 400":                      {&httpError{http.StatusBadRequest}, errclass.Invalid},
		"http 422":                      {&httpError{http.StatusUnprocessableEntity}, errclass.Invalid},
		"http 500":                      {&httpError{http.StatusInternalServerError}, errclass.Unknown},
		"k8s not found":                 {apierrors.NewNotFound(gr, "x"), errclass.NotFound},
		"k8s gone":                      {apierrors.NewGone("x"), errclass.NotFound}, //nolint:staticcheck // 410 Gone still reaches clients; it must classify
		"k8s conflict":                  {apierrors.NewConflict(gr, "x", errors.New("changed")), errclass.Conflict},
		"k8s already exists":            {apierrors.NewAlreadyExists(gr, "x"), errclass.Conflict},
		"k8s unauthorized":              {apierrors.NewUnauthorized("x"), errclass.Auth},
		"k8s forbidden":                 {apierrors.NewForbidden(gr, "x", errors.New("rbac")), errclass.Auth},
		"k8s forbidden, ns terminating": {terminating, errclass.Conflict},
		"k8s too many requests":         {apierrors.NewTooManyRequests("x", 1), errclass.Throttled},
		"k8s server timeout":            {apierrors.NewServerTimeout(gr, "get", 1), errclass.Transport},
		"k8s service unavailable":       {apierrors.NewServiceUnavailable("x"), errclass.Transport},
		"k8s invalid":                   {apierrors.NewInvalid(schema.GroupKind{Kind: "T"}, "x", nil), errclass.Invalid},
		"k8s bad request":               {apierrors.NewBadRequest("x"), errclass.Invalid},
		"k8s internal":                  {apierrors.NewInternalError(errors.New("x")), errclass.Unknown},
		"pg connection failure 08006":   {&sqlError{"08006"}, errclass.Transport},
		"pg admin shutdown 57P01":       {&sqlError{"57P01"}, errclass.Transport},
		"pg bad password 28P01":         {&sqlError{"28P01"}, errclass.Auth},
		"pg no role 28000":              {&sqlError{"28000"}, errclass.Auth},
		"pg undefined object 42704":     {&sqlError{"42704"}, errclass.NotFound},
		"pg no database 3D000":          {&sqlError{"3D000"}, errclass.NotFound},
		"pg duplicate object 42710":     {&sqlError{"42710"}, errclass.Conflict},
		"pg object in use 55006":        {&sqlError{"55006"}, errclass.Conflict},
		"pg dependents 2BP01":           {&sqlError{"2BP01"}, errclass.Conflict},
		"pg too many connections":       {&sqlError{"53300"}, errclass.Throttled},
		"pg syntax 42601":               {&sqlError{"42601"}, errclass.Invalid},
		"pg query canceled 57014":       {&sqlError{"57014"}, errclass.Canceled},
		"pg disk full 53100":            {&sqlError{"53100"}, errclass.Unknown},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if name != "nil" && tc.err == nil {
				t.Fatal("case has no error value")
			}
			got := errclass.Of(live, tc.err)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Of(%T %v) (-want +got):\n%s", tc.err, tc.err, diff)
			}
			if tc.err == nil {
				return
			}
			wrapped := fmt.Errorf("cleanup: %w", tc.err)
			if diff := cmp.Diff(tc.want, errclass.Of(live, wrapped)); diff != "" {
				t.Errorf("wrapped (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCallerContext: the same error is Transport while the caller is live
// and Canceled once the caller's context is done, so shutdown never evicts.
func TestCallerContext(t *testing.T) {
	done, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer cancel2()
	netErrs := realNetErrors(t)

	cases := map[string]struct {
		ctx  context.Context
		err  error
		want errclass.Class
	}{
		"deadline, caller live":        {t.Context(), context.DeadlineExceeded, errclass.Transport},
		"deadline, nil ctx":            {nil, context.DeadlineExceeded, errclass.Transport},
		"deadline, caller canceled":    {done, context.DeadlineExceeded, errclass.Canceled},
		"deadline, caller expired":     {expired, fmt.Errorf("rpc: %w", context.DeadlineExceeded), errclass.Canceled},
		"grpc deadline, caller done":   {done, status.Error(codes.DeadlineExceeded, "x"), errclass.Canceled},
		"reset, caller done":           {done, netErrs["read after peer reset"], errclass.Canceled},
		"canceled, caller live":        {t.Context(), context.Canceled, errclass.Canceled},
		"auth, caller done stays auth": {done, status.Error(codes.Unauthenticated, "x"), errclass.Auth},
		"not found, caller done":       {done, apierrors.NewNotFound(gr, "x"), errclass.NotFound},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, errclass.Of(tc.ctx, tc.err)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// errReconcileTimeout stands for a caller's own deadline cause, as
// controller-runtime gives its ReconciliationTimeout.
var errReconcileTimeout = errors.New("reconciliation timeout")

// TestCallTimeoutCause: a context done because the call's own bound fired
// (cause ErrCallTimeout) keeps a Transport verdict; any other cause of a
// done context (the caller's deadline with or without a cause of its own,
// a cancellation, a shutdown) still makes it Canceled. Without
// the cause, a caller deadline shorter than the call's
// bound turned every hang into Canceled.
func TestCallTimeoutCause(t *testing.T) {
	past := time.Unix(0, 0)
	ownBound, c1 := context.WithDeadlineCause(t.Context(), past, errclass.ErrCallTimeout)
	defer c1()
	// The call's bound fired first; the caller was cancelled after it.
	parent, cancelParent := context.WithCancel(t.Context())
	ownThenShutdown, c2 := context.WithDeadlineCause(parent, past, errclass.ErrCallTimeout)
	defer c2()
	cancelParent()
	// The caller's deadline (with its own cause) ended the call first: the
	// child's cause is the parent's, whatever the child would have set.
	callerFirst, c3 := context.WithDeadlineCause(t.Context(), past, errReconcileTimeout)
	defer c3()
	callerFirstChild, c4 := context.WithDeadlineCause(callerFirst, time.Now().Add(time.Hour), errclass.ErrCallTimeout)
	defer c4()
	// Shutdown first, then the call's bound would have fired.
	shutdown, cancelShutdown := context.WithCancel(t.Context())
	cancelShutdown()
	shutdownChild, c5 := context.WithDeadlineCause(shutdown, past, errclass.ErrCallTimeout)
	defer c5()
	// A cancellation that names ErrCallTimeout wrapped is still the bound.
	wrapped, c6 := context.WithCancelCause(t.Context())
	c6(fmt.Errorf("pool p: %w", errclass.ErrCallTimeout))
	live, c7 := context.WithDeadlineCause(t.Context(), time.Now().Add(time.Hour), errclass.ErrCallTimeout)
	defer c7()

	deadline := fmt.Errorf("rpc: %w", context.DeadlineExceeded)
	cases := map[string]struct {
		ctx  context.Context
		err  error
		want errclass.Class
	}{
		"own bound fired":                       {ownBound, deadline, errclass.Transport},
		"own bound fired, grpc deadline":        {ownBound, status.Error(codes.DeadlineExceeded, "x"), errclass.Transport},
		"own bound fired, then caller canceled": {ownThenShutdown, deadline, errclass.Transport},
		"own bound wrapped in the cause":        {wrapped, deadline, errclass.Transport},
		"own bound not yet fired":               {live, deadline, errclass.Transport},
		"caller deadline first":                 {callerFirstChild, deadline, errclass.Canceled},
		"caller deadline without a bound":       {callerFirst, deadline, errclass.Canceled},
		"shutdown first":                        {shutdownChild, deadline, errclass.Canceled},
		"own bound fired, canceled error":       {ownBound, context.Canceled, errclass.Canceled},
		"own bound fired, an answer":            {ownBound, status.Error(codes.NotFound, "x"), errclass.NotFound},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, errclass.Of(tc.ctx, tc.err)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

var errDomain = errors.New("tenant suspended")

func TestUserClassifiersFirst(t *testing.T) {
	suspended := func(_ context.Context, err error) (errclass.Class, bool) {
		if errors.Is(err, errDomain) {
			return errclass.Auth, true
		}
		return "", false
	}
	// Overrides a built-in verdict: this service reports throttling as 503.
	throttle503 := func(_ context.Context, err error) (errclass.Class, bool) {
		var h *httpError
		if errors.As(err, &h) && h.code == http.StatusServiceUnavailable {
			return errclass.Throttled, true
		}
		return "", false
	}
	c := errclass.New(nil, suspended, throttle503)
	cases := map[string]struct {
		err  error
		want errclass.Class
	}{
		"user rule":              {fmt.Errorf("x: %w", errDomain), errclass.Auth},
		"user rule overrides":    {&httpError{http.StatusServiceUnavailable}, errclass.Throttled},
		"falls through to rules": {status.Error(codes.NotFound, "x"), errclass.NotFound},
		"nil stays empty":        {nil, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, c.Classify(t.Context(), tc.err)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	var zero *errclass.Classifier
	if got := zero.Classify(t.Context(), io.EOF); got != errclass.Transport {
		t.Errorf("nil Classifier: got %q, want Transport", got)
	}
}

func TestHTTPStatus(t *testing.T) {
	got := map[int]errclass.Class{}
	for _, code := range []int{200, 204, 400, 401, 403, 404, 408, 409, 410, 412, 422, 429, 500, 502, 503, 504} {
		got[code] = errclass.HTTPStatus(code)
	}
	want := map[int]errclass.Class{
		200: errclass.Unknown, 204: errclass.Unknown, 400: errclass.Invalid, 401: errclass.Auth,
		403: errclass.Auth, 404: errclass.NotFound, 408: errclass.Transport, 409: errclass.Conflict,
		410: errclass.NotFound, 412: errclass.Conflict, 422: errclass.Invalid, 429: errclass.Throttled,
		500: errclass.Unknown, 502: errclass.Transport, 503: errclass.Transport, 504: errclass.Transport,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
