// Package pgsplice is an attacker's proxy for the tests: it sits between an
// operator and a PostgreSQL server, relays the login, the proofs and every
// other statement to that server, and splices chosen statements (the
// deletes) onto a session of its own with another server. What the
// operator sees is a normal session; what it deletes goes elsewhere.
//
// It speaks the wire protocol only as far as it must: message framing, the
// SSLRequest (answered with TLS of its own, a certificate nobody checks,
// when asked to, which is what sslmode=require accepts), and the simple
// Query message whose text it matches. It is test machinery, under
// internal/, and listens on loopback only.
package pgsplice

import (
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

// Options configure a Splicer.
type Options struct {
	// Primary is the server host:port the login and everything not
	// diverted go to.
	Primary string
	// Other is the DSN of the server diverted statements go to; the
	// splicer logs in there itself (the attacker knows the credentials).
	Other string
	// Divert reports whether a simple Query's SQL goes to Other.
	Divert func(sql string) bool
	// TLS makes the splicer accept SSLRequest with a self-signed
	// certificate, as a client with sslmode=require accepts.
	TLS bool
}

// Splicer is a running proxy.
type Splicer struct {
	o        Options
	l        net.Listener
	tls      *tls.Config
	diverted atomic.Int32
	wg       sync.WaitGroup
}

// New starts a Splicer on a free loopback port.
func New(o Options) (*Splicer, error) {
	if o.Primary == "" || o.Other == "" || o.Divert == nil {
		return nil, errors.New("pgsplice: Primary, Other and Divert are required")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgsplice: %w", err)
	}
	s := &Splicer{o: o, l: l}
	if o.TLS {
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
	var other *pgconn.HijackedConn
	defer func() {
		if other != nil {
			_ = other.Conn.Close()
		}
	}()
	var wmu sync.Mutex // guards writes to client
	go func() {
		// Everything the primary says goes to the client, message by
		// message, so a diverted reply never lands inside one of its.
		for {
			m, err := readMessage(primary)
			if err != nil {
				_ = client.Close()
				return
			}
			wmu.Lock()
			_, err = client.Write(m)
			wmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	for {
		m, err := readMessage(client)
		if err != nil {
			return err
		}
		if m[0] == 'Q' && s.o.Divert(strings.TrimRight(string(m[5:]), "\x00")) {
			if other == nil {
				if other, err = s.dialOther(); err != nil {
					return err
				}
			}
			s.diverted.Add(1)
			if err := s.divert(other.Conn, m, client, &wmu); err != nil {
				return err
			}
			continue
		}
		if _, err := primary.Write(m); err != nil {
			return err
		}
	}
}

// divert sends a Query to the other server and relays its reply, up to
// and including ReadyForQuery, to the client.
func (s *Splicer) divert(other net.Conn, q []byte, client net.Conn, wmu *sync.Mutex) error {
	if _, err := other.Write(q); err != nil {
		return err
	}
	for {
		m, err := readMessage(other)
		if err != nil {
			return err
		}
		wmu.Lock()
		_, err = client.Write(m)
		wmu.Unlock()
		if err != nil {
			return err
		}
		if m[0] == 'Z' {
			return nil
		}
	}
}

func (s *Splicer) dialOther() (*pgconn.HijackedConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, s.o.Other)
	if err != nil {
		return nil, fmt.Errorf("pgsplice: log in to the other server: %w", err)
	}
	return c.Hijack()
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
