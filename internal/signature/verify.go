package signature

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"

	"brewlet.sh/brewlet/internal/vocab"
)

// SignPredicateType is the in-toto predicate of a signature over an image digest (cosign's
// "sign" statement). An attestation of another kind (provenance, an SBOM) over the same
// digest by the same key is not an approval to run it.
const SignPredicateType = "https://sigstore.dev/cosign/sign/v1"

// Verified says which key met each requirement.
type Verified struct {
	// By lists "<source>: key <id> (bundle <manifest digest>)", one per requirement.
	By []string
}

// Verify checks that every requirement is met for digest (sha256:<hex>) by one of the
// bundles: a DSSE envelope of an in-toto statement with predicate SignPredicateType naming
// the digest as a subject, or a message signature over the digest, verified with one of
// the requirement's keys. No bundle at all is SignatureMissing; bundles of which none
// meets a requirement, SignatureInvalid naming the requirement and what each bundle
// failed on. where names the image for messages.
func Verify(where, digest string, found []Found, reqs Requirements) (Verified, error) {
	var out Verified
	if len(reqs) == 0 {
		return out, nil
	}
	alg, hexd, ok := strings.Cut(digest, ":")
	raw, err := hex.DecodeString(hexd)
	if !ok || alg != "sha256" || err != nil || len(raw) != 32 {
		return out, vocab.Errorf(vocab.ReasonSignatureInvalid, "%s: %q is not a sha256 digest", where, digest)
	}
	if len(found) == 0 {
		return out, vocab.Errorf(vocab.ReasonSignatureMissing, "%s: no Sigstore bundle is attached to %s (looked for OCI referrers of type %s, and the referrers tag); sign the digest (brewlet runtime sign --key, or cosign sign --new-bundle-format) with a key of %s", where, digest, BundleMediaType, sources(reqs))
	}
	parsed := make([]*bundle.Bundle, len(found))
	failures := make([]string, len(found))
	for i, f := range found {
		b := &bundle.Bundle{}
		if err := b.UnmarshalJSON(f.Bundle); err != nil {
			failures[i] = fmt.Sprintf("bundle %s: not a Sigstore bundle: %v", short(f.Manifest), err)
			continue
		}
		parsed[i] = b
	}
	for _, r := range reqs {
		by, why := meet(r, raw, found, parsed, failures)
		if by == "" {
			return Verified{}, vocab.Errorf(vocab.ReasonSignatureInvalid, "%s: none of the %d bundle(s) attached to %s is a signature of it by a key or identity of %s (%s): %s; sign the digest with one of those, or correct the requirement", where, len(found), digest, r.Source, keyIDs(r), strings.Join(why, "; "))
		}
		out.By = append(out.By, by)
	}
	return out, nil
}

func meet(r Requirement, digest []byte, found []Found, parsed []*bundle.Bundle, failures []string) (string, []string) {
	why := make([]string, 0, len(found))
	for i, b := range parsed {
		if b == nil {
			why = append(why, failures[i])
			continue
		}
		var last error
		for _, k := range r.Keys {
			if last = verifyWith(k, b, digest); last == nil {
				return fmt.Sprintf("%s: key %s (bundle %s)", r.Source, k.ID(), short(found[i].Manifest)), nil
			}
		}
		for _, id := range r.Identities {
			if last = verifyIdentity(r.Root, id, b, digest); last == nil {
				return fmt.Sprintf("%s: %s (bundle %s)", r.Source, id, short(found[i].Manifest)), nil
			}
		}
		why = append(why, fmt.Sprintf("bundle %s: %v", short(found[i].Manifest), last))
	}
	if len(why) > 5 {
		why = append(why[:5], fmt.Sprintf("and %d more", len(why)-5))
	}
	return "", why
}

// verifyWith checks one bundle with one key. The key is the trust anchor: no transparency
// log or timestamp is required (a key has no validity period to place the signature in),
// and any hint the bundle carries is ignored, so a bundle cannot choose its key.
func verifyWith(k Key, b verify.SignedEntity, digest []byte) error {
	material := root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) {
		return root.NewExpiringKey(k.verifier, time.Time{}, time.Time{}), nil
	})
	v, err := verify.NewVerifier(material, verify.WithNoObserverTimestamps())
	if err != nil {
		return err
	}
	return check(v, b, verify.NewPolicy(verify.WithArtifactDigest("sha256", digest), verify.WithKey()))
}

// verifyIdentity checks one bundle's certificate against root and the identity (issuer and
// subject), and its signature with the certificate's key.
func verifyIdentity(r *TrustedRoot, id Identity, b verify.SignedEntity, digest []byte) error {
	if r == nil {
		return fmt.Errorf("no trusted root to check %s against", id)
	}
	v, err := verifierFor(r)
	if err != nil {
		return err
	}
	return check(v, b, verify.NewPolicy(verify.WithArtifactDigest("sha256", digest), verify.WithCertificateIdentity(id.id)))
}

// check runs the verifier and accepts only a signature, not another kind of attestation.
func check(v *verify.Verifier, b verify.SignedEntity, p verify.PolicyBuilder) error {
	res, err := v.Verify(b, p)
	if err != nil {
		return err
	}
	if res.Statement != nil && res.Statement.GetPredicateType() != SignPredicateType {
		return fmt.Errorf("an attestation of type %q, not a signature (%s)", res.Statement.GetPredicateType(), SignPredicateType)
	}
	return nil
}

func sources(reqs Requirements) string {
	s := make([]string, len(reqs))
	for i, r := range reqs {
		s[i] = r.Source
	}
	return strings.Join(s, " and ")
}

func keyIDs(r Requirement) string {
	s := make([]string, 0, len(r.Keys)+len(r.Identities))
	for _, k := range r.Keys {
		s = append(s, k.ID())
	}
	for _, id := range r.Identities {
		s = append(s, id.String())
	}
	return strings.Join(s, ", ")
}

func short(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}
