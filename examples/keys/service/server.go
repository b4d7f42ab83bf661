package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// CloseGrace is how long Close lets calls in flight finish.
const CloseGrace = 5 * time.Second

// ErrCallsCut reports that Close ended calls still in flight after
// CloseGrace.
var ErrCallsCut = errors.New("service: calls were cut off by Close")

// ErrNotLoopback refuses an address off the loopback interface: the
// service is an example, with a plain-HTTP API, and listens nowhere else.
var ErrNotLoopback = errors.New("service: the key service listens on loopback only")

// CheckLoopback accepts host:port whose host is a loopback IP or
// "localhost".
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("service: listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%w: %q is not 127.0.0.1, ::1 or localhost", ErrNotLoopback, addr)
	}
	return nil
}

// Server is a Service served over HTTP on a loopback address.
type Server struct {
	*Service
	// URL is the base URL the service answers at.
	URL string

	srv       *http.Server
	done      chan error
	closeOnce sync.Once
	closeErr  error // Close's result; guarded by closeOnce

	// calls is held for reading by every call being served, so that Close
	// can wait for the last one: a call cut off at the deadline must not
	// write the keys after a restarted service on the same directory has.
	calls    sync.RWMutex
	closed   bool // guarded by calls
	inFlight atomic.Int64
}

// Start opens the service with o and serves it on addr, a loopback
// host:port; "" is 127.0.0.1 on a free port. Starting again on the
// address of a closed Server, with the same Options, is a restart.
func Start(addr string, o Options) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if err := CheckLoopback(addr); err != nil {
		return nil, err
	}
	s, err := New(o)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	srv := &Server{Service: s, URL: "http://" + l.Addr().String(), done: make(chan error, 1),
		srv: &http.Server{ReadHeaderTimeout: 10 * time.Second}}
	srv.srv.Handler = http.HandlerFunc(srv.serve)
	go func() { srv.done <- srv.srv.Serve(l) }()
	return srv, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.URL[len("http://"):] }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.calls.RLock()
	defer s.calls.RUnlock()
	if s.closed {
		fail(w, http.StatusServiceUnavailable, CodeUnavailable, "the service is closing")
		return
	}
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	s.Service.ServeHTTP(w, r)
}

// Close stops serving: new connections are refused, and calls in flight
// get CloseGrace to finish. Then every connection is closed, including
// those a client opened and has not sent a call on yet, which are not an
// error; calls still in flight are, an ErrCallsCut. Close returns once no
// call is being served, so nothing the closed service does follows it.
// Closing again returns the first Close's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), CloseGrace)
		defer cancel()
		err := s.srv.Shutdown(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			// Shutdown waits for a connection that has sent no call yet
			// as it does for a call; only the calls are worth reporting.
			if n := s.inFlight.Load(); n > 0 {
				s.closeErr = fmt.Errorf("%w: %d still in flight after %s", ErrCallsCut, n, CloseGrace)
			}
			err = s.srv.Close()
		}
		s.closeErr = errors.Join(s.closeErr, err)
		s.calls.Lock()
		s.closed = true
		s.calls.Unlock()
		if err := <-s.done; !errors.Is(err, http.ErrServerClosed) {
			s.closeErr = errors.Join(s.closeErr, err)
		}
	})
	return s.closeErr
}
