package faultinject

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of one target address, with
// faults that can be switched on and off while connections are open.
type Proxy struct {
	target string
	ln     net.Listener

	// h2 is set by NewHTTP2Proxy: links forward whole HTTP/2 frames.
	h2       bool
	refuse   atomic.Bool
	latency  atomic.Int64 // time.Duration
	accepted atomic.Int64
	refused  atomic.Int64
	pings    atomic.Int64 // PINGs answered on stalled links

	mu sync.Mutex
	// links holds the established connections; guarded by mu.
	links map[*link]struct{}
	// closed is set by Close; guarded by mu. Once set no link is added.
	closed bool

	wg   sync.WaitGroup // the accept loop and every link's pumps
	done chan struct{}  // closed by Close
}

// NewProxy listens on 127.0.0.1:0 and forwards every accepted connection to
// target over a fresh TCP connection.
func NewProxy(target string) (*Proxy, error) { return newProxy(target, false) }

func newProxy(target string, h2 bool) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultinject: proxy target %q is not host:port: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultinject: listen for proxy to %s: %w", target, err)
	}
	p := &Proxy{target: target, ln: ln, h2: h2, links: map[*link]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Accepted counts the connections accepted since NewProxy, refused ones
// included.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Refused counts the connections closed at once because of Refuse(true).
func (p *Proxy) Refused() int64 { return p.refused.Load() }

// Active is the number of established connections being proxied now.
func (p *Proxy) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Freeze stops every established connection from forwarding bytes, in both
// directions, without closing it: writes into it still succeed (the kernel
// buffers them) and reads never return. Connections accepted after Freeze
// are not frozen and work normally. It returns how many it froze.
func (p *Proxy) Freeze() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.freeze()
	}
	return len(p.links)
}

// Thaw lets every frozen connection forward again, bytes held while frozen
// included.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.thaw()
	}
}

// ResetAll aborts every established connection with a TCP RST on both
// sides and returns how many it reset. New connections are unaffected.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	for l := range links {
		l.abort()
	}
	return len(links)
}

// Refuse makes the proxy reset new connections as soon as it accepts them
// (on) or forward them again (off). Established connections are unaffected.
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// SetLatency delays every chunk of bytes by d before forwarding it, in both
// directions, on established and new connections; 0 turns it off.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines to exit.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	close(p.done)
	err := p.ln.Close()
	for l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.accepted.Add(1)
		if p.refuse.Load() {
			p.refused.Add(1)
			rst(c)
			continue
		}
		p.wg.Add(1)
		go p.connect(c)
	}
}

// connect dials the target for one accepted client connection; the dial runs
// off the accept loop so a slow target does not stall other clients.
func (p *Proxy) connect(client net.Conn) {
	defer p.wg.Done()
	var d net.Dialer
	server, err := d.Dial("tcp", p.target)
	if err != nil {
		rst(client)
		return
	}
	l := newLink(client, server)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var pumps sync.WaitGroup
	pumps.Add(2)
	if p.h2 {
		go func() { defer pumps.Done(); p.pumpClientFrames(l) }()
		go func() { defer pumps.Done(); p.pumpServerFrames(l) }()
	} else {
		go func() { defer pumps.Done(); p.pump(l, server, client) }()
		go func() { defer pumps.Done(); p.pump(l, client, server) }()
	}
	pumps.Wait()
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pump copies src to dst, holding each chunk while the link is frozen and
// for the configured latency.
func (p *Proxy) pump(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !l.waitOpen(p.done) || !p.delay(l) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				l.close()
				return
			}
		}
		if err != nil {
			l.ended(dst, err)
			return
		}
	}
}

// ended handles a read error on the side feeding dst.
func (l *link) ended(dst net.Conn, err error) {
	if errors.Is(err, io.EOF) {
		// Pass the half-close on so request/response protocols that
		// shut down their write side still get their answer.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
			return
		}
	}
	l.close()
}

// delay waits the configured latency; false means the link or proxy closed.
func (p *Proxy) delay(l *link) bool {
	d := time.Duration(p.latency.Load())
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.closed:
		return false
	case <-p.done:
		return false
	}
}

// link is one proxied connection: the client side, the target side and the
// freeze gate between them.
type link struct {
	client, server net.Conn

	mu sync.Mutex
	// thawed is nil while the link forwards and an open channel while it is
	// frozen, closed by thaw; guarded by mu.
	thawed chan struct{}

	// HTTP/2 links only (NewHTTP2Proxy). h2 is set once the client's
	// connection preface was seen; stalled by Stall, never cleared.
	h2, stalled atomic.Bool
	// cw serialises writes to the client: forwarded frames and the
	// proxy's own PING and SETTINGS acknowledgements.
	cw sync.Mutex

	// decided is closed once the client pump knows whether the link
	// speaks HTTP/2 (HTTP/2 links only).
	decided chan struct{}

	closeOnce sync.Once
	closed    chan struct{}
}

func newLink(client, server net.Conn) *link {
	return &link{client: client, server: server, closed: make(chan struct{}), decided: make(chan struct{})}
}

func (l *link) freeze() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.thawed == nil {
		l.thawed = make(chan struct{})
	}
}

func (l *link) thaw() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.thawed != nil {
		close(l.thawed)
		l.thawed = nil
	}
}

// waitOpen blocks while the link is frozen; false means it closed instead.
func (l *link) waitOpen(done <-chan struct{}) bool {
	for {
		l.mu.Lock()
		ch := l.thawed
		l.mu.Unlock()
		if ch == nil {
			select {
			case <-l.closed:
				return false
			default:
				return true
			}
		}
		select {
		case <-ch:
		case <-l.closed:
			return false
		case <-done:
			return false
		}
	}
}

func (l *link) close() {
	l.closeOnce.Do(func() {
		close(l.closed)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// abort closes both sides with RST instead of FIN.
func (l *link) abort() {
	l.closeOnce.Do(func() {
		close(l.closed)
		rst(l.client)
		rst(l.server)
	})
}

// rst closes c so that the peer sees a reset, not an orderly close.
func rst(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
