package signature

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"

	"brewlet.sh/brewlet/internal/vocab"
)

// MaxTrustedRootBytes bounds a trusted root file (the public Sigstore one is a few KiB).
const MaxTrustedRootBytes = 1 << 20

// TrustedRoot is a Sigstore trusted root (trusted_root.json): the certificate authorities
// keyless signing certificates chain to, and the transparency logs, timestamp authorities
// and certificate transparency logs that vouch for when a signature was made.
type TrustedRoot struct {
	// ID is the first 16 hex digits of the file's SHA-256, for messages and caches.
	ID   string
	root *root.TrustedRoot
}

// LoadTrustedRoot reads a trusted_root.json (chart value verification.trustedRoot).
func LoadTrustedRoot(path string) (*TrustedRoot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseTrustedRoot(b)
}

// ParseTrustedRoot parses a trusted_root.json.
func ParseTrustedRoot(b []byte) (*TrustedRoot, error) {
	if len(b) > MaxTrustedRootBytes {
		return nil, vocab.Errorf(vocab.ReasonSignatureInvalid, "the trusted root is %d bytes, more than %d", len(b), MaxTrustedRootBytes)
	}
	r, err := root.NewTrustedRootFromJSON(b)
	if err != nil {
		return nil, vocab.Wrap(vocab.ReasonSignatureInvalid, err, "the trusted root is not a Sigstore trusted_root.json")
	}
	if len(r.FulcioCertificateAuthorities()) == 0 {
		return nil, vocab.Errorf(vocab.ReasonSignatureInvalid, "the trusted root names no certificate authority, so no keyless certificate can chain to it")
	}
	sum := sha256.Sum256(b)
	return &TrustedRoot{ID: hex.EncodeToString(sum[:8]), root: r}, nil
}

// Identity is a keyless signer a requirement accepts.
type Identity struct {
	Issuer, Subject, SubjectRegExp string
	id                             verify.CertificateIdentity
}

// NewIdentity builds an identity: the issuer exactly, the subject exactly or by regexp.
func NewIdentity(issuer, subject, subjectRegExp string) (Identity, error) {
	if issuer == "" || (subject == "") == (subjectRegExp == "") {
		return Identity{}, fmt.Errorf("an identity names its issuer and exactly one of subject and subjectRegExp")
	}
	id, err := verify.NewShortCertificateIdentity(issuer, "", subject, subjectRegExp)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Issuer: issuer, Subject: subject, SubjectRegExp: subjectRegExp, id: id}, nil
}

func (i Identity) String() string {
	if i.Subject != "" {
		return fmt.Sprintf("%s from %s", i.Subject, i.Issuer)
	}
	return fmt.Sprintf("/%s/ from %s", i.SubjectRegExp, i.Issuer)
}

// verifierFor checks certificates against the root the way its contents allow: with
// transparency logs, an entry in one (its inclusion time places the short-lived certificate);
// with timestamp authorities only, a signed timestamp; with neither (a private CA issuing
// long-lived certificates), the current time. Certificate transparency is required where
// the root names CT logs.
func verifierFor(r *TrustedRoot) (*verify.Verifier, error) {
	var opts []verify.VerifierOption
	switch {
	case len(r.root.RekorLogs()) > 0:
		opts = append(opts, verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1))
	case len(r.root.TimestampingAuthorities()) > 0:
		opts = append(opts, verify.WithSignedTimestamps(1))
	default:
		opts = append(opts, verify.WithCurrentTime())
	}
	if len(r.root.CTLogs()) > 0 {
		opts = append(opts, verify.WithSignedCertificateTimestamps(1))
	}
	return verify.NewVerifier(r.root, opts...)
}
