// Package testca is a certificate authority for tests: a CA of its own (in no system
// store) and server certificates it issues, valid, expired or for other names, as PEM.
package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// CA issues server certificates.
type CA struct {
	Cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	PEM    []byte // the CA certificate
	serial atomic.Int64
}

// New creates a CA named name, valid from 30 days ago for 30 days more (leaves it issued
// in the past, expired ones included, verify at a moment within their own validity).
func New(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-30 * 24 * time.Hour),
		NotAfter:              time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.serial.Store(1)
	return ca, nil
}

// Leaf is an issued certificate and its key, as PEM.
type Leaf struct {
	CertPEM, KeyPEM []byte
}

// TLS is the leaf as a tls.Certificate.
func (l Leaf) TLS() (tls.Certificate, error) { return tls.X509KeyPair(l.CertPEM, l.KeyPEM) }

// Write writes cert and key as name.crt and name.key in dir and returns their paths.
func (l Leaf) Write(dir, name string) (cert, key string, err error) {
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err = os.WriteFile(cert, l.CertPEM, 0o644); err == nil {
		err = os.WriteFile(key, l.KeyPEM, 0o600)
	}
	return cert, key, err
}

// Server issues a server certificate for hosts (names or IP addresses), valid now.
func (ca *CA) Server(hosts ...string) (Leaf, error) {
	return ca.Issue(time.Now().Add(-time.Hour), time.Now().Add(30*24*time.Hour), x509.ExtKeyUsageServerAuth, hosts...)
}

// Client issues a client certificate named cn.
func (ca *CA) Client(cn string) (Leaf, error) {
	return ca.issue(pkix.Name{CommonName: cn}, time.Now().Add(-time.Hour), time.Now().Add(30*24*time.Hour), x509.ExtKeyUsageClientAuth, nil)
}

// Issue issues a certificate for hosts valid between notBefore and notAfter (an expired
// one when notAfter is past).
func (ca *CA) Issue(notBefore, notAfter time.Time, usage x509.ExtKeyUsage, hosts ...string) (Leaf, error) {
	return ca.issue(pkix.Name{CommonName: "brewlet-test"}, notBefore, notAfter, usage, hosts)
}

func (ca *CA) issue(subject pkix.Name, notBefore, notAfter time.Time, usage x509.ExtKeyUsage, hosts []string) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, err
	}
	tmpl := &x509.Certificate{
		Subject:     subject,
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := ca.Sign(tmpl, &key.PublicKey)
	if err != nil {
		return Leaf{}, err
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})}, nil
}

// Sign issues the certificate tmpl describes (its serial number set here) for pub and
// returns it as DER: for certificates Issue does not make (other extensions and usages).
func (ca *CA) Sign(tmpl *x509.Certificate, pub any) ([]byte, error) {
	tmpl.SerialNumber = big.NewInt(ca.serial.Add(1))
	return x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
}

// WriteCA writes the CA certificate to path.
func (ca *CA) WriteCA(path string) error { return os.WriteFile(path, ca.PEM, 0o644) }
