package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

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
		srv: &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}}
	go func() { srv.done <- srv.srv.Serve(l) }()
	return srv, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.URL[len("http://"):] }

// Close stops serving: new connections are refused, calls in flight get
// up to five seconds to finish.
// Closing again returns the first Close's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.closeErr = s.srv.Shutdown(ctx)
		if err := <-s.done; !errors.Is(err, http.ErrServerClosed) {
			s.closeErr = errors.Join(s.closeErr, err)
		}
	})
	return s.closeErr
}
