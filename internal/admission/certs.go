package admission

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Keys of the serving-certificate Secret. tls.crt/tls.key are the kubernetes.io/tls
// names, so the Secret is also usable by anything that expects that type.
const (
	KeyCABundle  = "ca.crt"      // PEM: every CA still trusted, newest first; the webhook caBundle
	KeyCAKey     = "ca.key"      // PEM: the key of the CA that signs serving certificates
	KeyNextCAKey = "ca-next.key" // PEM: a published successor CA's key, until it signs
	KeyCert      = "tls.crt"
	KeyKey       = "tls.key"
)

// Bundle is the PKI pod admission is served with, as stored in the Secret.
type Bundle struct {
	CABundle, CAKey, NextCAKey, Cert, Key []byte
}

// CertPolicy says how long certificates live and whom the serving certificate names.
type CertPolicy struct {
	CAValidity   time.Duration // default 5 years
	CertValidity time.Duration // default 90 days
	// Hosts: DNS names and IP addresses the API server dials (the Service's names; tests:
	// 127.0.0.1).
	Hosts []string
}

func (p CertPolicy) withDefaults() CertPolicy {
	if p.CAValidity <= 0 {
		p.CAValidity = 5 * 365 * 24 * time.Hour
	}
	if p.CertValidity <= 0 {
		p.CertValidity = 90 * 24 * time.Hour
	}
	return p
}

// clockSkew backdates certificates so an API server whose clock is a little behind the
// operator's accepts them at once.
const clockSkew = 5 * time.Minute

// Renew returns the bundle to store and whether it differs from b. Rules:
//   - a certificate is renewed when less than a third of its lifetime is left, so a
//     stopped operator has a long window to come back before anything expires;
//   - CA rotation has two phases. A due CA gets a successor that is only published: it
//     goes in front of the caBundle (with its key in NextCAKey) while the current CA keeps
//     signing. After promoteDelay, long enough for every API server to load the new
//     caBundle, the successor becomes the signer. A serving certificate moves to it only at
//     its own next renewal, so no API server meets a certificate from a CA it does not
//     trust yet. Old CAs stay in the bundle until they expire;
//   - anything unreadable, mismatched or expired is replaced, never trusted.
func Renew(b Bundle, p CertPolicy, now time.Time) (Bundle, bool, error) {
	p = p.withDefaults()
	out := b
	cas := unexpiredCAs(b.CABundle, now)
	signer, signerKey := matchCA(cas, b.CAKey)
	next, nextKey := matchCA(cas, b.NextCAKey)
	if next == signer {
		next, nextKey, out.NextCAKey = nil, nil, nil
	}
	if signer == nil { // first run, or nothing trustworthy: start over
		ca, key, kp, err := newCA(now, p.CAValidity)
		if err != nil {
			return b, false, err
		}
		cas, signer, signerKey, out.CAKey = []*x509.Certificate{ca}, ca, key, kp
		next, nextKey, out.NextCAKey = nil, nil, nil
	}
	if next == nil && signer.NotAfter.Sub(now) < p.CAValidity/3 {
		ca, key, kp, err := newCA(now, p.CAValidity)
		if err != nil {
			return b, false, err
		}
		cas, next, nextKey, out.NextCAKey = append([]*x509.Certificate{ca}, cas...), ca, key, kp
	}
	if next != nil && now.Sub(next.NotBefore.Add(clockSkew)) >= promoteDelay(p) {
		signer, signerKey, out.CAKey, out.NextCAKey = next, nextKey, out.NextCAKey, nil
	}
	out.CABundle = certsPEM(cas)
	if !servingValid(b, cas, p, now) {
		crt, key, err := issueServing(signer, signerKey, p, now)
		if err != nil {
			return b, false, err
		}
		out.Cert, out.Key = crt, key
	}
	changed := !bytes.Equal(out.CABundle, b.CABundle) || !bytes.Equal(out.CAKey, b.CAKey) ||
		!bytes.Equal(out.NextCAKey, b.NextCAKey) || !bytes.Equal(out.Cert, b.Cert) || !bytes.Equal(out.Key, b.Key)
	return out, changed, nil
}

// promoteDelay is how long a new CA is only published before it signs: minutes for
// real lifetimes, shorter for the short ones tests use.
func promoteDelay(p CertPolicy) time.Duration {
	return min(10*time.Minute, p.CAValidity/20)
}

// unexpiredCAs returns the bundle's CA certificates that have not expired, in order.
func unexpiredCAs(bundle []byte, now time.Time) []*x509.Certificate {
	var cas []*x509.Certificate
	for _, c := range parseCerts(bundle) {
		if c.IsCA && now.Before(c.NotAfter) {
			cas = append(cas, c)
		}
	}
	return cas
}

// matchCA returns the CA of cas whose public key is keyPEM's, nil if none.
func matchCA(cas []*x509.Certificate, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, nil
	}
	for _, c := range cas {
		if key.PublicKey.Equal(c.PublicKey) {
			return c, key
		}
	}
	return nil, nil
}

func servingValid(b Bundle, cas []*x509.Certificate, p CertPolicy, now time.Time) bool {
	pair, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil || len(pair.Certificate) == 0 {
		return false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || leaf.NotAfter.Sub(now) < p.CertValidity/3 {
		return false
	}
	dns, ips := splitHosts(p.Hosts)
	if !slices.Equal(leaf.DNSNames, dns) || !slices.EqualFunc(leaf.IPAddresses, ips, net.IP.Equal) {
		return false
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err == nil
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		// The date in the name tells rotated CAs apart in a caBundle.
		Subject:               pkix.Name{CommonName: "brewlet-pod-admission-ca-" + now.UTC().Format("20060102T150405Z")},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	kp, err := keyPEM(key)
	return ca, key, kp, err
}

func issueServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, p CertPolicy, now time.Time) ([]byte, []byte, error) {
	if len(p.Hosts) == 0 {
		return nil, nil, errors.New("serving certificate: no hosts to name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(p.CertValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter // a certificate cannot outlive its issuer
	}
	dns, ips := splitHosts(p.Hosts)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: p.Hosts[0]},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kp, nil
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

func parseKey(data []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(data)
	if blk == nil || blk.Type != "EC PRIVATE KEY" {
		return nil, errors.New("no EC private key")
	}
	return x509.ParseECPrivateKey(blk.Bytes)
}
