package signature

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/vocab"
)

// testImage is a random image in a registry on httptest that serves TLS and requires
// basic credentials, as users' registries do; its methods reach it with both.
type testImage struct {
	name.Digest
	rt   http.RoundTripper
	auth remote.Option
}

func (i testImage) attach(ctx context.Context, bundle []byte) (string, error) {
	return Attach(ctx, i.Digest, bundle, remote.WithTransport(i.rt), i.auth)
}

func (i testImage) fetch(ctx context.Context) ([]Found, error) {
	return Fetch(ctx, i.Digest, i.rt, i.auth)
}

// serveTLS serves h over TLS (httptest's certificate, trusted by the returned transport,
// which also keeps to TLS for this loopback address) behind basic credentials.
func serveTLS(t *testing.T, h http.Handler) (host string, rt http.RoundTripper, auth remote.Option) {
	t.Helper()
	const user, password = "signer", "sign-s3cret"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://"), registry.RequireTLS(srv.Client().Transport, false),
		remote.WithAuth(&authn.Basic{Username: user, Password: password})
}

// pushRandom puts a random image into a registry of its own and returns it. referrers says
// whether the registry has the referrers API (else the tag schema is the only way to find
// signatures).
func pushRandom(t *testing.T, referrers bool) testImage {
	t.Helper()
	host, rt, auth := serveTLS(t, ggcrregistry.New(ggcrregistry.WithReferrersSupport(referrers), ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(host + "/runtimes/python:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithTransport(rt), auth); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return testImage{Digest: tag.Context().Digest(d.String()), rt: rt, auth: auth}
}

func requirement(t *testing.T, source string, signers ...*Signer) Requirement {
	t.Helper()
	var pems []string
	for _, s := range signers {
		p, err := s.PublicPEM()
		if err != nil {
			t.Fatal(err)
		}
		pems = append(pems, string(p))
	}
	r, err := ParseKeys(source, pems)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newSigner(t *testing.T) *Signer {
	t.Helper()
	s, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSignFetchVerify(t *testing.T) {
	ctx := context.Background()
	alice, bob, carol := newSigner(t), newSigner(t), newSigner(t)
	for _, referrers := range []bool{true, false} {
		ref := pushRandom(t, referrers)
		other := pushRandom(t, referrers)
		attach := func(s *Signer, digest string) {
			t.Helper()
			b, err := s.Bundle(digest)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ref.attach(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		check := func(reqs Requirements) error {
			t.Helper()
			found, err := ref.fetch(ctx)
			if err != nil {
				t.Fatalf("referrers=%v: Fetch: %v", referrers, err)
			}
			_, err = Verify("test", ref.DigestStr(), found, reqs)
			return err
		}
		want := func(err error, reason vocab.Reason) {
			t.Helper()
			if vocab.ReasonOf(err) != reason {
				t.Fatalf("referrers=%v: got %v; want reason %q", referrers, err, reason)
			}
		}
		want(check(Requirements{requirement(t, "spec", alice)}), vocab.ReasonSignatureMissing)

		// A signature of another digest, attached here, is not a signature of this one.
		attach(alice, other.DigestStr())
		want(check(Requirements{requirement(t, "spec", alice)}), vocab.ReasonSignatureInvalid)

		// Bob's signature does not meet a requirement of Alice's key.
		attach(bob, ref.DigestStr())
		err := check(Requirements{requirement(t, "spec", alice)})
		want(err, vocab.ReasonSignatureInvalid)
		if !strings.Contains(err.Error(), alice.KeyID()) {
			t.Fatalf("message does not name the key required: %v", err)
		}
		// Either key of a requirement will do; every requirement must be met.
		if err := check(Requirements{requirement(t, "spec", alice, bob)}); err != nil {
			t.Fatalf("referrers=%v: %v", referrers, err)
		}
		want(check(Requirements{requirement(t, "spec", bob), requirement(t, "cluster", carol)}), vocab.ReasonSignatureInvalid)
		attach(carol, ref.DigestStr())
		if err := check(Requirements{requirement(t, "spec", bob), requirement(t, "cluster", carol)}); err != nil {
			t.Fatalf("referrers=%v: %v", referrers, err)
		}
	}
}

// An attestation of another predicate by the right key is not an approval.
func TestAttestationIsNotASignature(t *testing.T) {
	s := newSigner(t)
	ref := pushRandom(t, true)
	b, err := s.Bundle(ref.DigestStr())
	if err != nil {
		t.Fatal(err)
	}
	// Sign a statement of another predicate type with the same key.
	other, err := statement(ref.DigestStr(), "https://slsa.dev/provenance/v1")
	if err != nil {
		t.Fatal(err)
	}
	ob, err := s.bundleOf(other)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Verify("test", ref.DigestStr(), []Found{{Manifest: "sha256:x", Bundle: ob}}, Requirements{requirement(t, "spec", s)})
	if vocab.ReasonOf(err) != vocab.ReasonSignatureInvalid || !strings.Contains(err.Error(), "attestation") {
		t.Fatalf("got %v", err)
	}
	if _, err := Verify("test", ref.DigestStr(), []Found{{Manifest: "sha256:x", Bundle: b}}, Requirements{requirement(t, "spec", s)}); err != nil {
		t.Fatal(err)
	}
}

func TestParseKeysRefusesWhatIsNotAKey(t *testing.T) {
	good, _ := newSigner(t).PublicPEM()
	priv, _ := newSigner(t).PrivatePEM()
	for name, pems := range map[string][]string{
		"none":              nil,
		"garbage":           {"not a key"},
		"a private key":     {string(priv)},
		"two keys in one":   {string(good) + string(good)},
		"one good, one bad": {string(good), "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"},
		"too many":          {string(good), string(good), string(good), string(good), string(good), string(good), string(good), string(good), string(good)},
	} {
		if _, err := ParseKeys("spec", pems); vocab.ReasonOf(err) != vocab.ReasonSignatureInvalid {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

func FuzzVerify(f *testing.F) {
	s, _ := GenerateKey()
	d := "sha256:" + strings.Repeat("ab", 32)
	b, _ := s.Bundle(d)
	f.Add(b)
	f.Add([]byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}`))
	pub, _ := s.PublicPEM()
	req, _ := ParseKeys("fuzz", []string{string(pub)})
	f.Fuzz(func(t *testing.T, bundle []byte) {
		_, err := Verify("fuzz", d, []Found{{Manifest: "sha256:x", Bundle: bundle}}, Requirements{req})
		if err != nil && vocab.ReasonOf(err) == "" {
			t.Fatalf("untyped refusal: %v", err)
		}
	})
}

// A registry that answers a referrers lookup with more than a lookup reads is cut off: an
// error, not the memory.
func TestFetchBoundsWhatItReads(t *testing.T) {
	host, rt, auth := serveTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/referrers/") {
			w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
			_, _ = io.WriteString(w, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[`)
			entry := `{"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"x","digest":"sha256:` + strings.Repeat("a", 64) + `","size":1},`
			for range (maxReferrersBytes / len(entry)) + 10 {
				if _, err := io.WriteString(w, entry); err != nil {
					return
				}
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	ref, err := name.NewDigest(host + "/runtimes/python@sha256:" + strings.Repeat("b", 64))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Fetch(context.Background(), ref, rt, auth); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("got %v; want the answer cut off", err)
	}
}
