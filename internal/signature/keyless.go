package signature

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"

	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// MaxTrustedRootBytes bounds a trusted root file (the public Sigstore one is a few KiB).
const MaxTrustedRootBytes = 1 << 20

// TrustedRoot is a Sigstore trusted root (trusted_root.json): the certificate authorities
// keyless signing certificates chain to, and the transparency logs, timestamp authorities
// and certificate transparency logs that vouch for when a signature was made.
type TrustedRoot struct {
	sum  string // hex SHA-256 of the file, for Fingerprint
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
	return &TrustedRoot{sum: hex.EncodeToString(sum[:]), root: r}, nil
}

// Identity is a keyless signer a requirement accepts.
type Identity struct {
	Issuer, Subject, SubjectRegExp string
	id                             verify.CertificateIdentity
}

// NewIdentity builds an identity: the issuer exactly, the subject exactly or by a regular
// expression that must match the whole subject (it is anchored here: a pattern naming an
// organisation's prefix must not match a URI that merely contains it).
func NewIdentity(issuer, subject, subjectRegExp string) (Identity, error) {
	if issuer == "" || (subject == "") == (subjectRegExp == "") {
		return Identity{}, fmt.Errorf("an identity names its issuer and exactly one of subject and subjectRegExp")
	}
	anchored := ""
	if subjectRegExp != "" {
		anchored = "^(?:" + subjectRegExp + ")$"
	}
	id, err := verify.NewShortCertificateIdentity(issuer, "", subject, anchored)
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

// ClusterSource names the cluster's requirement in messages.
const ClusterSource = "the cluster's signature requirement (chart values verification.publicKeys and verification.keyless)"

// Cluster builds the cluster's requirement from the chart's files: PEM public keys
// (keysFile) and keyless identities (identitiesFile, a JSON list of {issuer, subject |
// subjectRegExp}), either may be "". Identities need root. Nil when neither file is given.
func Cluster(keysFile, identitiesFile string, root *TrustedRoot) (*Requirement, error) {
	if keysFile == "" && identitiesFile == "" {
		return nil, nil
	}
	r := &Requirement{Source: ClusterSource}
	if keysFile != "" {
		k, err := LoadKeyFile(ClusterSource, keysFile)
		if err != nil {
			return nil, err
		}
		r.Keys = k.Keys
	}
	if identitiesFile != "" {
		b, err := os.ReadFile(identitiesFile)
		if err != nil {
			return nil, err
		}
		var ids []brewletv1.KeylessIdentity
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ids); err != nil {
			return nil, vocab.Wrap(vocab.ReasonSignatureInvalid, err, "%s: %s is not a JSON list of {issuer, subject or subjectRegExp}", ClusterSource, identitiesFile)
		}
		if len(ids) == 0 || len(ids) > MaxKeys {
			return nil, vocab.Errorf(vocab.ReasonSignatureInvalid, "%s: %s names %d keyless identities; 1 to %d are accepted", ClusterSource, identitiesFile, len(ids), MaxKeys)
		}
		for i, k := range ids {
			id, err := NewIdentity(k.Issuer, k.Subject, k.SubjectRegExp)
			if err != nil {
				return nil, vocab.Wrap(vocab.ReasonSignatureInvalid, err, "%s: keyless identity %d cannot be used", ClusterSource, i)
			}
			r.Identities = append(r.Identities, id)
		}
		if root == nil {
			return nil, vocab.Errorf(vocab.ReasonSignatureInvalid, "%s names keyless identities, but no trusted root is configured to check their certificates against; set the chart value verification.trustedRoot", ClusterSource)
		}
		r.Root = root
	}
	return r, nil
}

// LoadCluster reads the chart's signature files, as brewlet-operator and every agent do
// (--signature-keys, --signature-identities, --signature-trusted-root; "" for each absent):
// the cluster's requirement (nil: none) and the trusted root (nil: none).
func LoadCluster(keysFile, identitiesFile, rootFile string) (*Requirement, *TrustedRoot, error) {
	var root *TrustedRoot
	if rootFile != "" {
		var err error
		if root, err = LoadTrustedRoot(rootFile); err != nil {
			return nil, nil, fmt.Errorf("the trusted root %s (chart value verification.trustedRoot): %w", rootFile, err)
		}
	}
	r, err := Cluster(keysFile, identitiesFile, root)
	if err != nil {
		return nil, nil, err
	}
	return r, root, nil
}
