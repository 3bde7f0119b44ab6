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
// reconciler then); a registry that did not answer is asked again sooner.
const (
	RecheckRefused    = time.Minute
	RecheckUnknown    = 15 * time.Second
	signatureTimeout  = 30 * time.Second
	maxCachedVerdicts = 1024
)

// SignatureChecker looks up and verifies the signatures of RuntimeImage digests. Verdicts
// are cached per image and requirements: a verified digest stays verified until the
// requirements change; a refusal is asked again after RecheckRefused.
type SignatureChecker struct {
	// Cluster is the cluster's signature keys (nil: none).
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

// Check returns the verdict on ri's spec digest and when to look again (0: not needed).
func (c *SignatureChecker) Check(ctx context.Context, ri *brewletv1.RuntimeImage) (Signature, time.Duration) {
	digest := DigestOf(ri.Spec.Source.Image)
	var cluster *signature.Requirement
	var root *signature.TrustedRoot
	if c != nil {
		cluster, root = c.Cluster, c.Root
	}
	reqs, err := signature.For(ri.Name, ri.Spec.Verification, cluster, root)
	if err != nil {
		return Signature{State: SignatureRefused, Digest: digest, Reason: vocab.ReasonOf(err), Message: err.Error()}, 0
	}
	if len(reqs) == 0 {
		return Signature{State: SignatureNotRequired, Digest: digest}, 0
	}
	key := ri.Spec.Source.Image + "|" + reqs.Fingerprint()
	now := c.now()
	c.mu.Lock()
	v, ok := c.cache[key]
	c.mu.Unlock()
	if ok && (v.sig.State == SignatureVerified || now.Sub(v.at) < RecheckRefused) {
		return v.sig, recheck(v.sig)
	}
	sig := c.check(ctx, ri.Name, ri.Spec.Source.Image, digest, reqs)
	if sig.State != SignatureUnknown {
		c.mu.Lock()
		if c.cache == nil || len(c.cache) >= maxCachedVerdicts {
			c.cache = map[string]verdict{}
		}
		c.cache[key] = verdict{sig: sig, at: now}
		c.mu.Unlock()
	}
	return sig, recheck(sig)
}

func (c *SignatureChecker) check(ctx context.Context, id, image, digest string, reqs signature.Requirements) Signature {
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

func recheck(s Signature) time.Duration {
	switch s.State {
	case SignatureRefused:
		return RecheckRefused
	case SignatureUnknown:
		return RecheckUnknown
	}
	return 0
}

func (c *SignatureChecker) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
