package install

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/signature"
	"brewlet.sh/brewlet/internal/vocab"
)

// sourceLookupTimeout bounds the signature lookup on one source.
const sourceLookupTimeout = 30 * time.Second

// VerificationOf is Request.Verification for a RuntimeImage's spec.verification: its JSON,
// which keeps Request comparable.
func VerificationOf(v *brewletv1.Verification) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "{}" // not reached for these types; an empty requirement is refused, never lifted
	}
	return string(b)
}

// requirements are what req's digest must satisfy on this node: the cluster's keys and the
// RuntimeImage's own, exactly as brewlet-operator requires them.
func (in *Installer) requirements(req Request) (signature.Requirements, error) {
	var v *brewletv1.Verification
	if req.Verification != "" {
		v = &brewletv1.Verification{}
		if err := json.Unmarshal([]byte(req.Verification), v); err != nil {
			return nil, vocab.Wrap(vocab.ReasonSignatureInvalid, err, "runtime %s: the RuntimeImage's spec.verification cannot be read", req.ID)
		}
	}
	return signature.For(req.ID, v, in.SignatureKeys, in.TrustedRoot)
}

// checkSignature verifies, before any layer is fetched, that req's digest is signed as
// required. The node trusts no one's word for it, brewlet-operator's Approved included: it
// reads the bundles itself, from the same sources as the install (a mirror's bundles
// count, since the signature, not the source, is checked) and verifies them with its own
// copy of the requirements. A signature missing everywhere or invalid is SignatureMissing
// or SignatureInvalid; a source that cannot be read is skipped; none readable is a pull
// failure. Every outcome is retried: a signature may be attached later.
func (in *Installer) checkSignature(ctx context.Context, req Request, sources []source) error {
	reqs, err := in.requirements(req)
	if err != nil || len(reqs) == 0 {
		return err
	}
	var refusal, failure error
	for _, src := range sources {
		var extra []remote.Option
		if in.Keychain != nil {
			extra = append(extra, remote.WithAuthFromKeychain(in.Keychain))
		}
		// Each source gets a bounded share, so a hostile or slow mirror cannot use up the
		// install's deadline before the origin is asked.
		sctx, cancel := context.WithTimeout(ctx, sourceLookupTimeout)
		found, err := signature.Fetch(sctx, src.ref, src.rt, registry.Options(sctx, in.Insecure, append(extra, in.Remote...)...)...)
		cancel()
		if err != nil {
			failure = registry.NodeHints.Classify(err, src.host, in.credentialSource(src.ref))
			in.logf("runtime %s generation %d: signatures from %s could not be read: %v", req.ID, req.Generation, src.host, failure)
			continue
		}
		if _, err := signature.Verify(fmt.Sprintf("runtime %s generation %d", req.ID, req.Generation), src.ref.DigestStr(), found, reqs); err != nil {
			if refusal == nil || vocab.ReasonOf(refusal) == vocab.ReasonSignatureMissing {
				refusal = err
			}
			continue
		}
		return nil
	}
	if refusal != nil {
		return refusal
	}
	return vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, failure, "runtime %s generation %d: no source of %s could be asked for its signatures; it is tried again later", req.ID, req.Generation, req.Image)
}
