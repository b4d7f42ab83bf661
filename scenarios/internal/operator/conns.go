package operator

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// errStopped is what a dial by a stopped operator returns.
var errStopped = errors.New("operator: stopped, its connections are closed")

// conns dials an operator's connections to the apiservers and remembers
// them, so that stopping it closes them all, in use or pooled, as its
// process's exit would.
type conns struct {
	dialer net.Dialer

	mu     sync.Mutex // guards open and closed
	open   map[*conn]struct{}
	closed bool
}

func newConns() *conns {
	// client-go's own dial timeout and keep-alive.
	return &conns{dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}, open: map[*conn]struct{}{}}
}

// DialContext dials addr, or fails once closeAll has run.
func (cs *conns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := cs.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, cs: cs}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		_ = nc.Close()
		return nil, errStopped
	}
	cs.open[c] = struct{}{}
	return c, nil
}

// closeAll closes every open connection and refuses new ones.
func (cs *conns) closeAll() {
	cs.mu.Lock()
	cs.closed = true
	open := cs.open
	cs.open = map[*conn]struct{}{}
	cs.mu.Unlock()
	for c := range open {
		_ = c.Conn.Close()
	}
}

// conn forgets itself when closed.
type conn struct {
	net.Conn
	cs *conns
}

func (c *conn) Close() error {
	c.cs.mu.Lock()
	delete(c.cs.open, c)
	c.cs.mu.Unlock()
	return c.Conn.Close()
}
