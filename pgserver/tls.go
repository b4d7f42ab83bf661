package pgserver

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// TLS is a server certificate (with any intermediates after it) and its
// private key, in PEM, for Options.TLS.
type TLS struct {
	CertPEM, KeyPEM []byte
}

// CA is a throwaway certificate authority for tests: NewCA makes one,
// Issue signs server certificates with it, and CertPEM is what a client
// pins (libpq's sslrootcert) to verify them.
type CA struct {
	// CertPEM is the CA's certificate.
	CertPEM []byte

	cert *x509.Certificate
	key  crypto.Signer
}

// certValidity bounds the CA's and its certificates' lives: a test's.
const certValidity = 24 * time.Hour

// NewCA makes a CA with a fresh P-256 key, valid for a day.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pgserver: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "finale pgserver test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certValidity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pgserver: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pgserver: CA certificate: %w", err)
	}
	return &CA{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}, nil
}

// Issue signs a server certificate for hosts (IP addresses or DNS names,
// at least one) with a fresh key.
func (ca *CA) Issue(hosts ...string) (TLS, error) {
	if len(hosts) == 0 {
		return TLS{}, errors.New("pgserver: Issue needs at least one host")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return TLS{}, fmt.Errorf("pgserver: server key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return TLS{}, fmt.Errorf("pgserver: server certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return TLS{}, fmt.Errorf("pgserver: server key: %w", err)
	}
	return TLS{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62)) // crypto/rand does not fail
	return n.Add(n, big.NewInt(1))
}

// writeTLS writes t's certificate and key into dir/tls, outside the data
// directory, readable by the server's user only (PostgreSQL refuses a key
// others may read), and returns the settings that turn TLS on with them.
func writeTLS(dir string, t *TLS, cred *syscall.Credential) (map[string]string, error) {
	if len(t.CertPEM) == 0 || len(t.KeyPEM) == 0 {
		return nil, errors.New("pgserver: Options.TLS needs CertPEM and KeyPEM")
	}
	d := filepath.Join(dir, "tls")
	if err := os.Mkdir(d, 0o700); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	files := map[string][]byte{"server.crt": t.CertPEM, "server.key": t.KeyPEM}
	paths := []string{d}
	for name, b := range files {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
		paths = append(paths, p)
	}
	if cred != nil {
		for _, p := range paths {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("pgserver: %w", err)
			}
		}
	}
	return map[string]string{
		"ssl":           "on",
		"ssl_cert_file": filepath.Join(d, "server.crt"),
		"ssl_key_file":  filepath.Join(d, "server.key"),
	}, nil
}
