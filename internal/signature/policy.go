// Package signature decides whether a runtime digest is signed as its approval requires:
// requirements built from public keys (a RuntimeImage's spec.verification, the cluster's
// signature keys), Sigstore bundles found as OCI referrers of the digest (with the
// referrers tag schema for registries without the API), and verification with
// sigstore-go. The operator checks before it approves a digest; every agent checks again
// before it installs one. docs/signatures.md describes the format and the decisions.
package signature

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"sort"
	"strings"

	sigsig "github.com/sigstore/sigstore/pkg/signature"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// Bounds on what a requirement may hold.
const (
	MaxKeys     = 8    // keys per requirement
	MaxKeyBytes = 4096 // one PEM public key
)

// Key is one public key a requirement accepts.
type Key struct {
	sum      string // hex SHA-256 of the DER (SubjectPublicKeyInfo) encoding
	verifier sigsig.Verifier
}

// ID is the key's fingerprint, the name messages use: the first 16 hex digits of the
// SHA-256 of its DER (SubjectPublicKeyInfo) encoding.
func (k Key) ID() string { return k.sum[:16] }

// keySum is the hex SHA-256 of a public key's DER (SubjectPublicKeyInfo) encoding.
func keySum(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// Requirement is one party that must have signed a digest: any one of its keys or keyless
// identities.
type Requirement struct {
	// Source names where the requirement comes from, for messages ("RuntimeImage
	// python-3.12 spec.verification", "the cluster's signature keys").
	Source     string
	Keys       []Key
	Identities []Identity
	// Root is what keyless identities' certificates are checked against (nil: none
	// configured, and an identity cannot be met).
	Root *TrustedRoot
}

// Requirements are all the parties that must have signed; each is met independently.
type Requirements []Requirement

// Fingerprint identifies the requirements' content, for caches and for what an approval
// was made under: the first 16 hex digits of the SHA-256 of a canonical JSON encoding
// (sources, whole key hashes, identities field by field, the trusted root's hash), so that
// no two different requirements share one.
func (rs Requirements) Fingerprint() string {
	type ident struct{ Issuer, Subject, SubjectRegExp string }
	type req struct {
		Source     string
		Keys       []string
		Identities []ident
		Root       string
	}
	out := make([]req, 0, len(rs))
	for _, r := range rs {
		q := req{Source: r.Source}
		for _, k := range r.Keys {
			q.Keys = append(q.Keys, k.sum)
		}
		sort.Strings(q.Keys)
		for _, id := range r.Identities {
			q.Identities = append(q.Identities, ident{id.Issuer, id.Subject, id.SubjectRegExp})
		}
		sort.Slice(q.Identities, func(i, j int) bool {
			a, b := q.Identities[i], q.Identities[j]
			return a.Issuer+"\x00"+a.Subject+"\x00"+a.SubjectRegExp < b.Issuer+"\x00"+b.Subject+"\x00"+b.SubjectRegExp
		})
		if r.Root != nil && len(r.Identities) > 0 {
			q.Root = r.Root.sum
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	b, _ := json.Marshal(out)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// ParseKeys builds a requirement from PEM public keys, one key per entry. A key that does
// not parse refuses the whole requirement (SignatureInvalid): a typo must never weaken
// what is required.
func ParseKeys(source string, pems []string) (Requirement, error) {
	r := Requirement{Source: source}
	if len(pems) == 0 {
		return r, vocab.Errorf(vocab.ReasonSignatureInvalid, "%s names no public key; name at least one PEM public key or remove the requirement", source)
	}
	if len(pems) > MaxKeys {
		return r, vocab.Errorf(vocab.ReasonSignatureInvalid, "%s names %d public keys; at most %d are accepted", source, len(pems), MaxKeys)
	}
	for i, p := range pems {
		k, err := parseKey([]byte(p))
		if err != nil {
			return r, vocab.Wrap(vocab.ReasonSignatureInvalid, err, "%s: key %d is not a PEM public key (-----BEGIN PUBLIC KEY-----, ECDSA, RSA or Ed25519); fix it, the requirement is refused as a whole", source, i)
		}
		r.Keys = append(r.Keys, k)
	}
	return r, nil
}

// LoadKeyFile reads a file of concatenated PEM public keys (the cluster's signature keys).
func LoadKeyFile(source, path string) (Requirement, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Requirement{Source: source}, fmt.Errorf("read signature keys %s: %w", path, err)
	}
	if len(b) > MaxKeys*MaxKeyBytes {
		return Requirement{Source: source}, vocab.Errorf(vocab.ReasonSignatureInvalid, "%s (%s) is %d bytes; at most %d keys of %d bytes are accepted", source, path, len(b), MaxKeys, MaxKeyBytes)
	}
	var pems []string
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			if strings.TrimSpace(string(rest)) != "" {
				return Requirement{Source: source}, vocab.Errorf(vocab.ReasonSignatureInvalid, "%s (%s) holds text that is not a PEM block; the file must hold only PEM public keys", source, path)
			}
			break
		}
		pems = append(pems, string(pem.EncodeToMemory(blk)))
	}
	return ParseKeys(source, pems)
}

func parseKey(b []byte) (Key, error) {
	if len(b) > MaxKeyBytes {
		return Key{}, fmt.Errorf("%d bytes, more than %d", len(b), MaxKeyBytes)
	}
	blk, rest := pem.Decode(b)
	if blk == nil {
		return Key{}, fmt.Errorf("no PEM block")
	}
	if strings.TrimSpace(string(rest)) != "" {
		return Key{}, fmt.Errorf("text after the PEM block (one key per entry)")
	}
	if blk.Type != "PUBLIC KEY" {
		return Key{}, fmt.Errorf("a PEM block of type %q, not PUBLIC KEY", blk.Type)
	}
	pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return Key{}, err
	}
	return newKey(pub)
}

func newKey(pub crypto.PublicKey) (Key, error) {
	v, err := sigsig.LoadDefaultVerifier(pub)
	if err != nil {
		return Key{}, err
	}
	sum, err := keySum(pub)
	if err != nil {
		return Key{}, err
	}
	return Key{sum: sum, verifier: v}, nil
}

// For is what a RuntimeImage's digests must satisfy: the cluster's keys (nil: none) and
// the RuntimeImage's own spec.verification (nil: none), whose keyless identities are checked
// against root (nil: none configured). Nothing required is an empty list.
func For(id string, v *brewletv1.Verification, cluster *Requirement, root *TrustedRoot) (Requirements, error) {
	var out Requirements
	if cluster != nil {
		out = append(out, *cluster)
	}
	if v == nil {
		return out, nil
	}
	source := fmt.Sprintf("RuntimeImage %s spec.verification", id)
	r := Requirement{Source: source}
	if len(v.PublicKeys) > 0 {
		var err error
		if r, err = ParseKeys(source, v.PublicKeys); err != nil {
			return nil, err
		}
	}
	if len(v.Keyless) > MaxKeys {
		return nil, vocab.Errorf(vocab.ReasonSignatureInvalid, "%s names %d keyless identities; at most %d are accepted", source, len(v.Keyless), MaxKeys)
	}
	for i, k := range v.Keyless {
		ident, err := NewIdentity(k.Issuer, k.Subject, k.SubjectRegExp)
		if err != nil {
			return nil, vocab.Wrap(vocab.ReasonSignatureInvalid, err, "%s: keyless identity %d cannot be used; fix it, the requirement is refused as a whole", source, i)
		}
		r.Identities = append(r.Identities, ident)
	}
	if len(r.Keys)+len(r.Identities) == 0 {
		return nil, vocab.Errorf(vocab.ReasonSignatureInvalid, "%s names no public key and no keyless identity; name at least one or remove it", source)
	}
	if len(r.Identities) > 0 {
		if root == nil {
			return nil, vocab.Errorf(vocab.ReasonSignatureInvalid, "%s names keyless identities, but no trusted root is configured to check their certificates against; set the chart value verification.trustedRoot (a Sigstore trusted_root.json)", source)
		}
		r.Root = root
	}
	return append(out, r), nil
}
