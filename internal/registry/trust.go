package registry

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"brewlet.sh/brewlet/internal/vocab"
)

// maxCAFileBytes bounds one CA file an administrator adds: a full system bundle is about
// 200 KiB; a file far larger is a mistake (or an attempt to exhaust the agent's memory).
const maxCAFileBytes = 4 << 20

// Trust is the certificate authorities a component trusts for registries: the system
// bundle of its image (Debian's ca-certificates) plus the PEM files an administrator adds
// (the chart's registry.caBundle). Per-registry CAs of the node's containerd configuration
// are added by NodeHosts for that registry only.
type Trust struct {
	pool  *x509.CertPool
	extra []*x509.Certificate // the administrator's, added to per-registry pools too
}

// LoadTrust reads the system bundle and every extra PEM file. A file that cannot be read,
// is over the size bound or holds no certificate refuses the whole trust: an agent that
// silently trusted less than its administrator configured would fail every pull from that
// registry with a far less helpful message.
func LoadTrust(caFiles []string) (*Trust, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	t := &Trust{pool: pool}
	for _, f := range caFiles {
		certs, err := readPEMFile(f)
		if err != nil {
			return nil, err
		}
		for _, c := range certs {
			pool.AddCert(c)
		}
		t.extra = append(t.extra, certs...)
	}
	return t, nil
}

func readPEMFile(path string) ([]*x509.Certificate, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("registry CA file %s: %w", path, err)
	}
	defer func() { _ = fh.Close() }()
	b, err := io.ReadAll(io.LimitReader(fh, maxCAFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("registry CA file %s: %w", path, err)
	}
	if len(b) > maxCAFileBytes {
		return nil, vocab.Errorf(vocab.ReasonLimitExceeded, "registry CA file %s is larger than %d bytes; give a PEM file of CA certificates", path, maxCAFileBytes)
	}
	certs, err := parseCertificates(b)
	if err != nil {
		return nil, fmt.Errorf("registry CA file %s: %w", path, err)
	}
	return certs, nil
}

// parseCertificates reads every CERTIFICATE block of a PEM file and refuses a file with
// none or with one that does not parse (AppendCertsFromPEM skips those silently).
func parseCertificates(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block found; give the CA certificates in PEM form")
	}
	return out, nil
}

// Pool is a copy of the trusted authorities: a caller may add to it without widening
// what anyone else trusts.
func (t *Trust) Pool() *x509.CertPool {
	if t == nil || t.pool == nil {
		if p, err := x509.SystemCertPool(); err == nil && p != nil {
			return p
		}
		return x509.NewCertPool()
	}
	return t.pool.Clone()
}

// withExtra adds the administrator's authorities to a pool built for one registry.
func (t *Trust) withExtra(pool *x509.CertPool) *x509.CertPool {
	if t != nil {
		for _, c := range t.extra {
			pool.AddCert(c)
		}
	}
	return pool
}

// TLSConfig is the client configuration for registries with no configuration of their
// own: the trusted authorities, TLS 1.2 or later.
func (t *Trust) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: t.Pool(), MinVersion: tls.VersionTLS12}
}

// Hints say, in a component's own terms, how to give it authorities and credentials: the
// last clause of a registry failure's message.
type Hints struct {
	Trust       string // for a certificate signed by an unknown authority
	Credentials string // for a 401/403; %s is the registry host
}

// NodeHints are the node agent's (chart values and the node's containerd configuration).
var NodeHints = Hints{
	Trust:       "add its CA with the chart value registry.caBundle or in the node's containerd hosts.toml for that registry (ca = ...)",
	Credentials: "give the agent credentials for %s (the chart value provisioner.registry.credentialsSecret) or check the ones it has",
}

// OperatorHints are brewlet-operator's, which reads signatures from the runtimes'
// repositories with the agents' CA bundle and credentials Secret.
var OperatorHints = Hints{
	Trust:       "add its CA with the chart value registry.caBundle, which brewlet-operator reads too",
	Credentials: "give brewlet-operator credentials for %s (the chart value provisioner.registry.credentialsSecret, which it reads too) or check the ones it has",
}

// CLIHints are the brewlet command's.
var CLIHints = Hints{
	Trust:       "pass its CA with --ca-file",
	Credentials: "log in to %s (docker login, or a credential helper in the Docker config) or check the credentials",
}

// Classify turns what a registry call's error says about the registry's identity or the
// client's credentials into a typed reason naming the host and what to do; any other error
// is returned as it is. source, when set, names where refused credentials came from (a
// credential provider). It is applied outermost, so the reason is the one users see.
func (h Hints) Classify(err error, host, source string) error {
	if err == nil {
		return nil
	}
	// A credential provider's failure is the cause, however deep the pull wrapped it.
	if e := vocab.Find(err, vocab.ReasonCredentialProviderFailed); e != nil {
		return e
	}
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		verify   *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &hostname):
		return vocab.Wrap(vocab.ReasonRegistryCertificateInvalid, err, "registry %s presented a certificate for another host name; name the registry as its certificate does, or have the certificate reissued", host)
	case errors.As(err, &invalid):
		what := "is not valid"
		switch invalid.Reason {
		case x509.Expired:
			what = "has expired or is not valid yet"
		case x509.NotAuthorizedToSign, x509.CANotAuthorizedForThisName, x509.CANotAuthorizedForExtKeyUsage:
			what = "was signed by a certificate not allowed to sign it"
		}
		return vocab.Wrap(vocab.ReasonRegistryCertificateInvalid, err, "the certificate of registry %s %s; renew it on the registry (and check this machine's clock)", host, what)
	case errors.As(err, &unknown), errors.As(err, &verify):
		return vocab.Wrap(vocab.ReasonRegistryCertificateInvalid, err, "registry %s presented a certificate signed by no trusted authority; %s", host, h.Trust)
	}
	var te *transport.Error
	if errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden) {
		if source != "" {
			return vocab.Wrap(vocab.ReasonRegistryCredentialsRefused, err, "registry %s refused the credentials of %s (HTTP %d); check what the provider answers for it", host, source, te.StatusCode)
		}
		return vocab.Wrap(vocab.ReasonRegistryCredentialsRefused, err, "registry %s refused the credentials (HTTP %d); "+h.Credentials, host, te.StatusCode, host)
	}
	return err
}
