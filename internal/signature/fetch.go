package signature

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// BundleMediaType is the artifact type of a Sigstore bundle attached to an image as an OCI
// referrer (cosign sign --new-bundle-format writes the same).
const BundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"

// emptyMediaType is the config of an artifact manifest that has none.
const emptyMediaType = "application/vnd.oci.empty.v1+json"

// Bounds on what one lookup reads from a registry, which is untrusted for signatures: the
// bundle's signature, not where it came from, is what counts.
const (
	MaxReferrers      = 32       // bundle manifests read per digest
	maxAttempts       = 64       // referrer manifests tried per digest, readable or not
	MaxManifestBytes  = 64 << 10 // one referrer manifest
	MaxBundleBytes    = 1 << 20  // one bundle
	maxReferrersBytes = 4 << 20  // the referrers index (every artifact type)
)

// Found is one bundle attached to a digest.
type Found struct {
	// Manifest is the digest of the referrer manifest that carried it.
	Manifest string
	Bundle   []byte
}

// Fetch returns the Sigstore bundles attached to ref's digest: the referrers API, or the
// referrers tag (sha256-<hex>) where the registry has no such API. No bundle is not an
// error (Verify says SignatureMissing); a registry that cannot be read is. At most
// MaxReferrers bundle manifests are read; each is checked against its digest and its
// subject, and each bundle against its digest and MaxBundleBytes.
//
// transport carries every request (nil: http.DefaultTransport); no response body it
// delivers is read past maxReferrersBytes, so neither a referrers index nor anything else a
// hostile registry or mirror answers can take more memory than that.
func Fetch(ctx context.Context, ref name.Digest, transport http.RoundTripper, opts ...remote.Option) ([]Found, error) {
	if transport == nil {
		transport = http.DefaultTransport
	}
	opts = append(append([]remote.Option{}, opts...), remote.WithContext(ctx), remote.WithTransport(limitBodies{transport, maxReferrersBytes}))
	idx, err := remote.Referrers(ref, opts...)
	if err != nil {
		if notFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list the referrers of %s: %w", ref, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read the referrers of %s: %w", ref, err)
	}
	var out []Found
	tried := 0
	for _, d := range im.Manifests {
		if d.ArtifactType != BundleMediaType && d.ArtifactType != emptyMediaType {
			// The filter is the registry's to apply, and it may not have. Some registries
			// report the config's media type (the empty one) instead of the manifest's
			// artifactType; the manifest itself is judged below.
			continue
		}
		if len(out) == MaxReferrers || tried == maxAttempts {
			break
		}
		tried++
		if d.Size > MaxManifestBytes {
			continue
		}
		f, err := fetchOne(ref, d, opts)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// One unreadable bundle must not hide the others; Verify reports only what it read.
			continue
		}
		out = append(out, f)
	}
	return out, nil
}

// referrerManifest is the part of an OCI image manifest a bundle referrer is judged by.
type referrerManifest struct {
	MediaType    string          `json:"mediaType"`
	ArtifactType string          `json:"artifactType"`
	Config       v1.Descriptor   `json:"config"`
	Layers       []v1.Descriptor `json:"layers"`
	Subject      *v1.Descriptor  `json:"subject"`
}

func fetchOne(ref name.Digest, d v1.Descriptor, opts []remote.Option) (Found, error) {
	mref := ref.Context().Digest(d.Digest.String())
	desc, err := remote.Get(mref, opts...)
	if err != nil {
		return Found{}, err
	}
	if err := checkDigest(desc.Manifest, d.Digest, MaxManifestBytes); err != nil {
		return Found{}, fmt.Errorf("referrer manifest %s: %w", d.Digest, err)
	}
	var m referrerManifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return Found{}, fmt.Errorf("referrer manifest %s: %w", d.Digest, err)
	}
	if m.Subject == nil || m.Subject.Digest.String() != ref.DigestStr() {
		return Found{}, fmt.Errorf("referrer manifest %s does not name %s as its subject", d.Digest, ref.DigestStr())
	}
	if len(m.Layers) != 1 || string(m.Layers[0].MediaType) != BundleMediaType || m.Layers[0].Size > MaxBundleBytes || m.Layers[0].Size < 0 {
		return Found{}, fmt.Errorf("referrer manifest %s does not hold exactly one bundle of at most %d bytes", d.Digest, MaxBundleBytes)
	}
	l, err := remote.Layer(ref.Context().Digest(m.Layers[0].Digest.String()), opts...)
	if err != nil {
		return Found{}, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return Found{}, err
	}
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(io.LimitReader(rc, MaxBundleBytes+1))
	if err != nil {
		return Found{}, err
	}
	if err := checkDigest(b, m.Layers[0].Digest, MaxBundleBytes); err != nil {
		return Found{}, fmt.Errorf("bundle %s: %w", m.Layers[0].Digest, err)
	}
	return Found{Manifest: d.Digest.String(), Bundle: b}, nil
}

func checkDigest(b []byte, want v1.Hash, limit int) error {
	if len(b) > limit {
		return fmt.Errorf("more than %d bytes", limit)
	}
	if want.Algorithm != "sha256" {
		return fmt.Errorf("digest algorithm %q is not sha256", want.Algorithm)
	}
	sum := sha256.Sum256(b)
	if !strings.EqualFold(hex.EncodeToString(sum[:]), want.Hex) {
		return fmt.Errorf("content does not match its digest")
	}
	return nil
}

// limitBodies ends every response body after n bytes with an error: a registry cannot make a
// lookup read more.
type limitBodies struct {
	base http.RoundTripper
	n    int64
}

func (l limitBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: l.n}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("a registry answer longer than %d bytes, more than a signature lookup reads", maxReferrersBytes)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// notFound: the repository or the referrers tag does not exist, which is "no bundles".
func notFound(err error) bool {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode == http.StatusNotFound
	}
	return false
}
