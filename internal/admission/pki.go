package admission

import (
	"bytes"
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
	"time"
)

// issueOneShot makes a CA that signs exactly one serving certificate and is forgotten:
// its private key lives in this function only, is never encoded (no PEM or DER copy to
// leak), and is unreachable once it returns. Both certificates share one validity window,
// so the CA is trusted exactly as long as the certificate it signed.
func issueOneShot(p CertPolicy, now time.Time) (s *serving, crt, key []byte, err error) {
	if len(p.Hosts) == 0 {
		return nil, nil, nil, errors.New("serving certificate: no hosts to name (set the webhook Service's names)")
	}
	eraseAfter(func() { s, crt, key, err = signOneShot(p, now) })
	return s, crt, key, err
}

func signOneShot(p CertPolicy, now time.Time) (*serving, []byte, []byte, error) {
	notBefore, notAfter := now.Add(-clockSkew), now.Add(p.CertValidity)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial(),
		// The date in the name tells rotated CAs apart in a caBundle.
		Subject:               pkix.Name{CommonName: "brewlet-pod-admission-ca-" + now.UTC().Format("20060102T150405Z")},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	dns, ips := splitHosts(p.Hosts)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: p.Hosts[0]},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return &serving{leaf: leaf, issuer: ca}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kp, nil
}

func splitHosts(hosts []string) ([]string, []net.IP) {
	var dns []string
	var ips []net.IP
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	return dns, ips
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the platform's randomness is gone
	}
	return n
}

func certsPEM(cs []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range cs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

func parseCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, data = pem.Decode(data)
		if blk == nil {
			return out
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// ecPublicKeyOf returns the public half of a PEM EC private key (the only kind this
// package ever wrote), nil if it is not one.
func ecPublicKeyOf(data []byte) *ecdsa.PublicKey {
	blk, _ := pem.Decode(data)
	if blk == nil || blk.Type != "EC PRIVATE KEY" {
		return nil
	}
	k, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		return nil
	}
	return &k.PublicKey
}
