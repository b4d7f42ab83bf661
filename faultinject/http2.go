package faultinject

import (
	"bytes"
	"errors"
	"io"
	"net"
)

// HTTP/2 framing (RFC 9113, section 4.1): a 9-byte header of a 24-bit
// payload length, a type, flags and a stream ID, then the payload.
const (
	frameHeaderLen = 9
	frameSettings  = 0x4
	framePing      = 0x6
	flagAck        = 0x1
	pingPayloadLen = 8
)

// clientPreface is what every HTTP/2 client sends first (RFC 9113, 3.4).
var clientPreface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// ErrNotHTTP2 is returned by Stall on a proxy made by NewProxy: only an
// HTTP/2-aware proxy knows where frames begin.
var ErrNotHTTP2 = errors.New("faultinject: Stall needs a proxy made by NewHTTP2Proxy")

// NewHTTP2Proxy is NewProxy for HTTP/2 traffic in cleartext (gRPC without
// TLS): it forwards whole frames, so that Stall can act between them.
// Freeze, Thaw, ResetAll, Refuse and SetLatency work as on NewProxy's
// proxy, frame by frame. A connection that does not open with the HTTP/2
// preface is forwarded as plain bytes, and Stall leaves it alone.
func NewHTTP2Proxy(target string) (*Proxy, error) { return newProxy(target, true) }

// Stall makes every established HTTP/2 connection look alive and answer
// nothing: from then on the proxy itself acknowledges the client's PINGs
// and SETTINGS, and forwards nothing else in either direction. Every call
// on such a connection waits for its deadline, while the client's HTTP/2
// keepalive sees a healthy peer and never closes it. Connections accepted
// after Stall are served normally. It returns how many connections it
// stalled.
//
// This is what an HTTP/2-terminating middlebox does when the backend
// behind it hangs (it answers PINGs itself), and why a keepalive does not
// heal what Freeze heals. There is no undo: the frames swallowed leave
// client and server out of step (header compression state, stream IDs),
// so a stalled connection can only be closed, by the client, ResetAll or
// Close.
func (p *Proxy) Stall() (int, error) {
	if !p.h2 {
		return 0, ErrNotHTTP2
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.links {
		if l.h2.Load() {
			l.stalled.Store(true)
			n++
		}
	}
	return n, nil
}

// PingsAnswered counts the PINGs the proxy acknowledged itself on stalled
// connections: proof that a client's keepalive was fooled.
func (p *Proxy) PingsAnswered() int64 { return p.pings.Load() }

// pumpClientFrames forwards the client's preface and frames to the server;
// on a stalled link it answers PING and SETTINGS and drops everything.
func (p *Proxy) pumpClientFrames(l *link) {
	pre, isH2, err := readPreface(l.client)
	l.h2.Store(isH2)
	close(l.decided)
	if len(pre) > 0 {
		if !l.waitOpen(p.done) || !p.delay(l) {
			return
		}
		if _, werr := l.server.Write(pre); werr != nil {
			l.close()
			return
		}
	}
	if err != nil {
		l.ended(l.server, err)
		return
	}
	if !isH2 {
		p.pump(l, l.server, l.client)
		return
	}
	var buf []byte
	for {
		var frame []byte
		frame, buf, err = readFrame(l.client, buf)
		if err != nil {
			if l.stalled.Load() {
				l.close() // the client gave up on the connection
				return
			}
			l.ended(l.server, err)
			return
		}
		if !l.waitOpen(p.done) || !p.delay(l) {
			return
		}
		if l.stalled.Load() {
			if err := p.answer(l, frame); err != nil {
				l.close()
				return
			}
			continue
		}
		if _, err := l.server.Write(frame); err != nil {
			l.close()
			return
		}
	}
}

// pumpServerFrames forwards the server's frames to the client, whole, and
// drops them once the link is stalled.
func (p *Proxy) pumpServerFrames(l *link) {
	select {
	case <-l.decided:
	case <-l.closed:
		return
	}
	if !l.h2.Load() {
		p.pump(l, l.client, l.server)
		return
	}
	var buf []byte
	for {
		var frame []byte
		var err error
		frame, buf, err = readFrame(l.server, buf)
		if err != nil {
			if l.stalled.Load() {
				// The server gave up (its keepalive, say); the client's
				// side must go on looking alive.
				return
			}
			l.ended(l.client, err)
			return
		}
		if !l.waitOpen(p.done) || !p.delay(l) {
			return
		}
		if l.stalled.Load() {
			continue
		}
		if err := l.writeClient(frame); err != nil {
			l.close()
			return
		}
	}
}

// answer acknowledges a PING or SETTINGS frame of a stalled link's client.
func (p *Proxy) answer(l *link, frame []byte) error {
	typ, flags := frame[3], frame[4]
	if flags&flagAck != 0 {
		return nil
	}
	switch {
	case typ == framePing && len(frame) == frameHeaderLen+pingPayloadLen:
		ack := make([]byte, frameHeaderLen+pingPayloadLen)
		ack[2], ack[3], ack[4] = pingPayloadLen, framePing, flagAck
		copy(ack[frameHeaderLen:], frame[frameHeaderLen:])
		if err := l.writeClient(ack); err != nil {
			return err
		}
		p.pings.Add(1)
	case typ == frameSettings:
		return l.writeClient([]byte{0, 0, 0, frameSettings, flagAck, 0, 0, 0, 0})
	}
	return nil
}

func (l *link) writeClient(b []byte) error {
	l.cw.Lock()
	defer l.cw.Unlock()
	_, err := l.client.Write(b)
	return err
}

// readPreface reads the client's first bytes for as long as they match the
// HTTP/2 preface, and never past it: a client of another protocol whose
// first message is short is not kept waiting for 24 bytes.
func readPreface(c net.Conn) (got []byte, isH2 bool, err error) {
	buf := make([]byte, len(clientPreface))
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if !bytes.Equal(buf[:n], clientPreface[:n]) {
			return buf[:n], false, nil
		}
		if err != nil {
			return buf[:n], false, err
		}
	}
	return buf, true, nil
}

// readFrame reads one whole frame into buf (grown as needed) and returns
// it, and buf for the next call.
func readFrame(c net.Conn, buf []byte) (frame, next []byte, err error) {
	if cap(buf) < frameHeaderLen {
		buf = make([]byte, frameHeaderLen, 16<<10)
	}
	buf = buf[:frameHeaderLen]
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, buf, err
	}
	n := frameHeaderLen + (int(buf[0])<<16 | int(buf[1])<<8 | int(buf[2]))
	if cap(buf) < n {
		grown := make([]byte, n)
		copy(grown, buf)
		buf = grown
	}
	buf = buf[:n]
	if _, err := io.ReadFull(c, buf[frameHeaderLen:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // a frame cut short is not an orderly close
		}
		return nil, buf, err
	}
	return buf, buf, nil
}
