package faultinject

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// LagProxy is a TCP proxy on 127.0.0.1 that delays what its target sends
// back by a set time, partitions, and fails over to another target: the
// link between a kube-apiserver and etcd whose watch cache must lag by a
// controlled amount, or the load balancer in front of several apiservers.
//
// Unlike Proxy.SetLatency, which holds each chunk in turn (so a busy
// connection falls further and further behind), the lag is a pipeline:
// every chunk the target sends is delivered the set time after it
// arrived, whatever came before it, so the client sees the target exactly
// that much in the past and no more. Bytes from the client go through at
// once.
type LagProxy struct {
	ln net.Listener

	mu sync.Mutex
	// target, lag, parted, links and closed are guarded by mu; wake is
	// closed and replaced whenever lag or parted change, to wake the pumps.
	target string
	lag    time.Duration
	parted bool
	links  map[*lagLink]struct{}
	closed bool
	wake   chan struct{}

	wg   sync.WaitGroup // the accept loop and every link's pumps
	done chan struct{}  // closed by Close
}

// NewLagProxy listens on 127.0.0.1:0 and forwards every accepted
// connection to target.
func NewLagProxy(target string) (*LagProxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultinject: lag proxy target %q is not host:port: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultinject: listen for lag proxy to %s: %w", target, err)
	}
	p := &LagProxy{ln: ln, target: target, links: map[*lagLink]struct{}{}, wake: make(chan struct{}), done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *LagProxy) Addr() string { return p.ln.Addr().String() }

// Target is where new connections go.
func (p *LagProxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// Lag is the current delay of what the target sends.
func (p *LagProxy) Lag() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lag
}

// SetLag makes every chunk the target sends reach the client d after it
// arrived at the proxy, on established and new connections; chunks held
// when d is lowered go as soon as their new time has come. 0 turns it off.
func (p *LagProxy) SetLag(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lag = max(d, 0)
	p.kick()
}

// Partition cuts the link (on) or restores it (off). While cut, established
// connections forward nothing in either direction (they stay open; what
// is sent is held), and new connections are reset as soon as they are
// accepted: the client sees a peer that went silent and cannot be
// reached again. On restore, what was held flows (subject to the lag) and
// new connections are accepted.
func (p *LagProxy) Partition(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parted = on
	p.kick()
}

// Partitioned reports whether the link is cut.
func (p *LagProxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parted
}

// Retarget sends new connections to target and resets the established
// ones (TCP RST), as a load balancer does when its backend fails over; it
// returns how many it reset.
func (p *LagProxy) Retarget(target string) (int, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return 0, fmt.Errorf("faultinject: lag proxy target %q is not host:port: %w", target, err)
	}
	p.mu.Lock()
	p.target = target
	links := p.links
	p.links = map[*lagLink]struct{}{}
	p.mu.Unlock()
	for l := range links {
		l.abort()
	}
	return len(links), nil
}

// Active is the number of established connections.
func (p *LagProxy) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines to exit.
func (p *LagProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := p.links
	p.links = map[*lagLink]struct{}{}
	p.mu.Unlock()
	close(p.done)
	err := p.ln.Close()
	for l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}

// kick wakes every pump waiting on the lag or the partition; mu is held.
func (p *LagProxy) kick() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// state returns the lag, whether the link is cut, and the channel closed
// at the next change.
func (p *LagProxy) state() (time.Duration, bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lag, p.parted, p.wake
}

func (p *LagProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		parted, target := p.parted, p.target
		p.mu.Unlock()
		if parted {
			rst(c)
			continue
		}
		p.wg.Add(1)
		go p.connect(c, target)
	}
}

func (p *LagProxy) connect(client net.Conn, target string) {
	defer p.wg.Done()
	var d net.Dialer
	server, err := d.Dial("tcp", target)
	if err != nil {
		rst(client)
		return
	}
	l := &lagLink{client: client, server: server, closed: make(chan struct{})}
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
	go func() { defer pumps.Done(); p.pump(l, server, client, false) }()
	go func() { defer pumps.Done(); p.pump(l, client, server, true) }()
	pumps.Wait()
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

type chunk struct {
	b  []byte
	at time.Time // when it arrived
}

// pump copies src to dst: a reader queues each chunk with its arrival
// time, and the writer delivers it once the link is not cut and, for what
// the target sends (lagged), once the lag has passed since it arrived.
func (p *LagProxy) pump(l *lagLink, dst, src net.Conn, lagged bool) {
	queue := make(chan chunk, 1024)
	p.wg.Add(1) // the caller holds one, so Close cannot be past its Wait
	go func() {
		defer p.wg.Done()
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case queue <- chunk{b: buf[:n], at: time.Now()}:
				case <-l.closed:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					l.close()
				}
				return
			}
		}
	}()
	for c := range queue {
		if !p.wait(l, c.at, lagged) {
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			l.close()
			return
		}
	}
	// The source closed its side: pass the half-close on.
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// wait blocks until a chunk that arrived at may go; false means the link
// or the proxy closed.
func (p *LagProxy) wait(l *lagLink, at time.Time, lagged bool) bool {
	for {
		lag, parted, wake := p.state()
		var t *time.Timer
		var timer <-chan time.Time
		if !parted {
			if !lagged || lag == 0 {
				return true
			}
			left := time.Until(at.Add(lag))
			if left <= 0 {
				return true
			}
			t = time.NewTimer(left)
			timer = t.C
		}
		select {
		case <-timer:
		case <-wake:
		case <-l.closed:
		case <-p.done:
		}
		if t != nil {
			t.Stop()
		}
		select {
		case <-l.closed:
			return false
		case <-p.done:
			return false
		default:
		}
	}
}

// lagLink is one proxied connection.
type lagLink struct {
	client, server net.Conn
	closeOnce      sync.Once
	closed         chan struct{}
}

func (l *lagLink) close() {
	l.closeOnce.Do(func() {
		close(l.closed)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// abort closes both sides with RST instead of FIN.
func (l *lagLink) abort() {
	l.closeOnce.Do(func() {
		close(l.closed)
		rst(l.client)
		rst(l.server)
	})
}
