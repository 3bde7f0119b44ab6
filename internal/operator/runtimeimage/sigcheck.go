package runtimeimage

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/signature"
	"brewlet.sh/brewlet/internal/vocab"
)

// Signature rechecks: a refused digest may be signed later (nothing else wakes the
// reconciler then); a registry that did not answer is asked again sooner; a verified digest
// is read again now and then, so a signature taken away or a keyless certificate that
// expired is noticed.
const (
	RecheckRefused    = time.Minute
	RecheckUnknown    = 15 * time.Second
	RecheckVerified   = 10 * time.Minute
	signatureTimeout  = 30 * time.Second
	maxCachedVerdicts = 1024
)

// SignatureChecker looks up and verifies the signatures of RuntimeImage digests. Verdicts
// are cached per image and requirements: verified ones for RecheckVerified (a recheck the
// registry cannot answer keeps them), refusals for RecheckRefused, unanswered lookups for
// RecheckUnknown, so that reconcile passes woken by node reports do not ask the registry.
// A nil checker checks only spec.verification, with the system's trust.
type SignatureChecker struct {
	// Cluster is the cluster's requirement (nil: none).
	Cluster *signature.Requirement
	// Root is what keyless identities' certificates are checked against (nil: none).
	Root *signature.TrustedRoot
	// Transport reaches registries (trust, proxy, the plain-HTTP policy); Remote are further
	// registry options (credentials).
	Transport http.RoundTripper
	Remote    []remote.Option
	// Insecure allows plain HTTP to non-loopback registries.
	Insecure bool
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu    sync.Mutex
	cache map[string]verdict
}

type verdict struct {
	sig Signature
	at  time.Time
}

// Verdicts are what the reconciler hands Decide: the spec's digest, and, while a rotation to
// it is held, the digest of the generation the nodes have, judged by the same requirements.
type Verdicts struct {
	Spec, Current Signature
	// Previous is the verdict on status.previous's digest while a rollback to it is due
	// (rollbackDue): a digest that stopped verifying is not served again.
	Previous Signature
}

// imagesToCheck are the images whose signatures Decide needs a verdict on, in Verdicts'
// order (spec, current, previous; "" where none is needed).
func imagesToCheck(ri *brewletv1.RuntimeImage) []string {
	images := []string{ri.Spec.Source.Image, "", ""}
	if cur := ri.Status.Digest; cur != "" && cur != DigestOf(ri.Spec.Source.Image) && ri.Status.Epoch == ri.UID {
		// Looked up where the generation came from: after a rollback, or a rotation held on
		// an unsigned digest of another repository, the spec's repository may not hold it.
		images[1] = brewletv1.GenerationRef{Digest: cur, Image: ri.Status.Image}.PullFrom(ri.Spec.Source.Image)
	}
	if due, prev := rollbackDue(ri, &ri.Status); due && prev != nil {
		images[2] = prev.PullFrom(ri.Spec.Source.Image)
	}
	return images
}

// previousDigest is the digest a due rollback would serve again ("": none is due).
func previousDigest(st *brewletv1.RuntimeImageStatus) string {
	if st.Previous == nil {
		return ""
	}
	return st.Previous.Digest
}

// CheckAll returns the verdicts for ri and when to look again (0: not needed). Nothing is
// looked up for a RuntimeImage being deleted or revoked: it is not approved either way.
func (c *SignatureChecker) CheckAll(ctx context.Context, ri *brewletv1.RuntimeImage) (Verdicts, time.Duration) {
	if ri.DeletionTimestamp != nil || ri.Spec.Revoked {
		return Verdicts{}, 0
	}
	if c == nil {
		c = &SignatureChecker{}
	}
	images := imagesToCheck(ri)
	reqs, err := signature.For(ri.Name, ri.Spec.Verification, c.Cluster, c.Root)
	var sigs [3]Signature
	var after time.Duration
	for i, image := range images {
		var a time.Duration
		switch {
		case image == "":
			continue
		case err != nil:
			sigs[i] = Signature{State: SignatureRefused, Digest: DigestOf(image), Reason: vocab.ReasonOf(err), Message: err.Error()}
		case len(reqs) == 0:
			sigs[i] = Signature{State: SignatureNotRequired, Digest: DigestOf(image)}
		default:
			sigs[i], a = c.check(ctx, ri.Name, image, reqs)
		}
		if a > 0 && (after == 0 || a < after) {
			after = a
		}
	}
	return Verdicts{Spec: sigs[0], Current: sigs[1], Previous: sigs[2]}, after
}

// check judges one image (repo@digest) by reqs, which require something.
func (c *SignatureChecker) check(ctx context.Context, id, image string, reqs signature.Requirements) (Signature, time.Duration) {
	digest := DigestOf(image)
	fp := reqs.Fingerprint()
	key := image + "|" + fp
	now := c.now()
	c.mu.Lock()
	prev, cached := c.cache[key]
	c.mu.Unlock()
	if cached && now.Sub(prev.at) < recheck(prev.sig) {
		return prev.sig, recheck(prev.sig)
	}
	sig := c.lookup(ctx, id, image, digest, reqs)
	sig.Requirements = fp
	if sig.State == SignatureUnknown && cached && prev.sig.State == SignatureVerified {
		// The registry did not answer a recheck: what was verified stays verified.
		return prev.sig, RecheckUnknown
	}
	c.mu.Lock()
	if c.cache == nil || len(c.cache) >= maxCachedVerdicts {
		c.cache = map[string]verdict{}
	}
	c.cache[key] = verdict{sig: sig, at: now}
	c.mu.Unlock()
	return sig, recheck(sig)
}

func (c *SignatureChecker) lookup(ctx context.Context, id, image, digest string, reqs signature.Requirements) Signature {
	ref, err := registry.Digest(image, c.Insecure)
	if err != nil {
		return Signature{State: SignatureRefused, Digest: digest, Reason: vocab.ReasonOf(err), Message: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, signatureTimeout)
	defer cancel()
	found, err := signature.Fetch(ctx, ref, c.Transport, c.Remote...)
	if err != nil {
		err = registry.OperatorHints.Classify(err, ref.RegistryStr(), "")
		return Signature{State: SignatureUnknown, Digest: digest, Reason: vocab.ReasonSignatureUnverifiable,
			Message: "the signatures of " + image + " could not be read: " + err.Error() + "; brewlet-operator asks again shortly"}
	}
	ok, err := signature.Verify("RuntimeImage "+id, digest, found, reqs)
	if err != nil {
		return Signature{State: SignatureRefused, Digest: digest, Reason: vocab.ReasonOf(err), Message: err.Error()}
	}
	return Signature{State: SignatureVerified, Digest: digest, Message: strings.Join(ok.By, "; ")}
}

// recheck is how long a verdict holds: when the reconciler looks again, and how long the
// cache keeps it (only verdicts that require a signature are cached).
func recheck(s Signature) time.Duration {
	switch s.State {
	case SignatureRefused:
		return RecheckRefused
	case SignatureUnknown:
		return RecheckUnknown
	case SignatureVerified:
		return RecheckVerified
	}
	return 0
}

func (c *SignatureChecker) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
