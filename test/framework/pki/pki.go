// Package pki is the test control plane's certificate authority: a CA and the leaf
// certificates of the API server, its clients and kubelets, written as PEM files.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is the control plane's certificate set, written as PEM files in dir.
type PKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	CACert string // paths
	CAKey  string
	Server string
	SrvKey string
	Admin  string
	AdmKey string
	SAKey  string // service-account signing key (RSA)
	SAPub  string
	// KubeletClient is the API server's client certificate towards kubelets (logs, exec).
	KubeletClient    string
	KubeletClientKey string
}

// certValidity is long enough for a local cluster left running for days (make demo).
const certValidity = 30 * 24 * time.Hour

// New creates the CA and the control plane's certificates; the API server's is valid for
// loopback and the extra addresses.
func New(dir string, apiServerIPs ...net.IP) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{dir: dir}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "brewlet-e2e-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caKey = caKey
	if p.CACert, err = writePEM(dir, "ca.crt", "CERTIFICATE", der); err != nil {
		return nil, err
	}
	if p.CAKey, err = writeECKey(dir, "ca.key", caKey); err != nil {
		return nil, err
	}
	p.Server, p.SrvKey, err = p.Issue("apiserver", pkix.Name{CommonName: "kube-apiserver"},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		append([]net.IP{net.ParseIP("127.0.0.1")}, apiServerIPs...), x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	p.Admin, p.AdmKey, err = p.Issue("admin", pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	p.KubeletClient, p.KubeletClientKey, err = p.Issue("apiserver-kubelet-client",
		pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}}, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if p.SAKey, err = writePEM(dir, "sa.key", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(sa)); err != nil {
		return nil, err
	}
	pub, _ := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if p.SAPub, err = writePEM(dir, "sa.pub", "PUBLIC KEY", pub); err != nil {
		return nil, err
	}
	return p, nil
}

// Issue signs a leaf certificate with the CA and writes it to the PKI directory.
func (p *PKI) Issue(name string, subj pkix.Name, dns []string, ips []net.IP, usage x509.ExtKeyUsage) (string, string, error) {
	return p.IssueIn(p.dir, name, subj, dns, ips, usage)
}

// IssueIn signs a leaf certificate with the CA and writes <dir>/<name>.crt and .key.
func (p *PKI) IssueIn(dir, name string, subj pkix.Name, dns []string, ips []net.IP, usage x509.ExtKeyUsage) (string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subj,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		return "", "", err
	}
	crt, err := writePEM(dir, name+".crt", "CERTIFICATE", der)
	if err != nil {
		return "", "", err
	}
	k, err := writeECKey(dir, name+".key", key)
	return crt, k, err
}

func writeECKey(dir, name string, k *ecdsa.PrivateKey) (string, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return "", err
	}
	return writePEM(dir, name, "EC PRIVATE KEY", der)
}

func writePEM(dir, name, typ string, der []byte) (string, error) {
	p := filepath.Join(dir, name)
	return p, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
