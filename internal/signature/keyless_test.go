package signature

import (
	"context"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/testutil/fulciotest"
	"brewlet.sh/brewlet/internal/vocab"
)

const (
	ghIssuer   = "https://token.actions.githubusercontent.com"
	ghWorkflow = "https://github.com/example/runtimes/.github/workflows/release.yml@refs/heads/main"
)

func trustedRoot(t *testing.T, ca *fulciotest.CA) *TrustedRoot {
	t.Helper()
	b, err := ca.TrustedRoot()
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseTrustedRoot(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestKeylessIdentities(t *testing.T) {
	ctx := context.Background()
	fulcio, err := fulciotest.New()
	if err != nil {
		t.Fatal(err)
	}
	other, err := fulciotest.New()
	if err != nil {
		t.Fatal(err)
	}
	ref := pushRandom(t, true)
	d := ref.DigestStr()
	trust := trustedRoot(t, fulcio)
	spec := func(ids ...brewletv1.KeylessIdentity) Requirements {
		t.Helper()
		reqs, err := For("python", &brewletv1.Verification{Keyless: ids}, nil, trust)
		if err != nil {
			t.Fatal(err)
		}
		return reqs
	}
	exact := brewletv1.KeylessIdentity{Issuer: ghIssuer, Subject: ghWorkflow}
	pattern := brewletv1.KeylessIdentity{Issuer: ghIssuer, SubjectRegExp: `^https://github\.com/example/runtimes/\.github/workflows/release\.yml@refs/tags/v[0-9.]+$`}
	for _, tc := range []struct {
		name            string
		ca              *fulciotest.CA
		issuer, subject string
		digest          string
		reqs            Requirements
		want            vocab.Reason
	}{
		{"the workflow named, from its issuer", fulcio, ghIssuer, ghWorkflow, d, spec(exact), ""},
		{"a tag the pattern allows", fulcio, ghIssuer, strings.Replace(ghWorkflow, "heads/main", "tags/v1.2", 1), d, spec(pattern), ""},
		{"a URI that merely contains what the pattern names", fulcio, ghIssuer, "https://evil.example/x?" + strings.Replace(ghWorkflow, "heads/main", "tags/v1.2", 1), d, spec(pattern), vocab.ReasonSignatureInvalid},
		{"another workflow", fulcio, ghIssuer, strings.Replace(ghWorkflow, "release", "nightly", 1), d, spec(exact, pattern), vocab.ReasonSignatureInvalid},
		{"the workflow, from another issuer", fulcio, "https://accounts.google.com", ghWorkflow, d, spec(exact), vocab.ReasonSignatureInvalid},
		{"a certificate from a CA the root does not trust", other, ghIssuer, ghWorkflow, d, spec(exact), vocab.ReasonSignatureInvalid},
		{"a signature of another digest", fulcio, ghIssuer, ghWorkflow, "sha256:" + strings.Repeat("0", 64), spec(exact), vocab.ReasonSignatureInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.ca.Bundle(tc.issuer, tc.subject, tc.digest)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Verify("test", d, []Found{{Manifest: "sha256:x", Bundle: b}}, tc.reqs)
			if vocab.ReasonOf(err) != tc.want {
				t.Fatalf("got %v; want %q", err, tc.want)
			}
		})
	}
	// Through a registry: the bundle found as a referrer.
	b, err := fulcio.Bundle(ghIssuer, ghWorkflow, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.attach(ctx, b); err != nil {
		t.Fatal(err)
	}
	found, err := ref.fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify("test", d, found, spec(exact)); err != nil {
		t.Fatal(err)
	}
}

func TestKeylessNeedsATrustedRoot(t *testing.T) {
	_, err := For("python", &brewletv1.Verification{Keyless: []brewletv1.KeylessIdentity{{Issuer: ghIssuer, Subject: ghWorkflow}}}, nil, nil)
	if vocab.ReasonOf(err) != vocab.ReasonSignatureInvalid || !strings.Contains(err.Error(), "verification.trustedRoot") {
		t.Fatalf("got %v", err)
	}
	for _, bad := range []brewletv1.KeylessIdentity{{Subject: ghWorkflow}, {Issuer: ghIssuer}, {Issuer: ghIssuer, Subject: "a", SubjectRegExp: "b"}, {Issuer: ghIssuer, SubjectRegExp: "("}} {
		f, _ := fulciotest.New()
		b, _ := f.TrustedRoot()
		trust, _ := ParseTrustedRoot(b)
		if _, err := For("python", &brewletv1.Verification{Keyless: []brewletv1.KeylessIdentity{bad}}, nil, trust); vocab.ReasonOf(err) != vocab.ReasonSignatureInvalid {
			t.Errorf("%+v: got %v", bad, err)
		}
	}
	if _, err := ParseTrustedRoot([]byte(`{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}`)); vocab.ReasonOf(err) != vocab.ReasonSignatureInvalid {
		t.Errorf("a root without authorities: %v", err)
	}
}

func FuzzParseTrustedRoot(f *testing.F) {
	fulcio, _ := fulciotest.New()
	b, _ := fulcio.TrustedRoot()
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseTrustedRoot(b); err != nil && vocab.ReasonOf(err) == "" {
			t.Fatalf("untyped refusal: %v", err)
		}
	})
}

// With transparency logs in the root, a certificate is placed in time by its log entry
// (public Sigstore's short-lived certificates): sigstore-go's virtual Sigstore plays
// Fulcio, Rekor and a timestamp authority. Its certificates carry no SCTs, so the root given
// names no CT log (with one, an SCT is required).
func TestKeylessWithATransparencyLog(t *testing.T) {
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	// The virtual logs carry their hex log ID's characters as the ID; a real root carries the
	// ID's bytes, which its JSON form keeps (and the map key is their hex).
	realIDs := func(logs map[string]*root.TransparencyLog) map[string]*root.TransparencyLog {
		out := map[string]*root.TransparencyLog{}
		for k, l := range logs {
			c := *l
			if c.ID, err = hex.DecodeString(k); err != nil {
				t.Fatal(err)
			}
			out[k] = &c
		}
		return out
	}
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, vs.FulcioCertificateAuthorities(), nil, vs.TimestampingAuthorities(), realIDs(vs.RekorLogs()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseTrustedRoot(b)
	if err != nil {
		t.Fatal(err)
	}
	d := strings.Repeat("ab", 32)
	raw, _ := hex.DecodeString(d)
	stmt, err := statement("sha256:"+d, SignPredicateType)
	if err != nil {
		t.Fatal(err)
	}
	id, err := NewIdentity(ghIssuer, ghWorkflow, "")
	if err != nil {
		t.Fatal(err)
	}
	logged, err := vs.AttestAtTime(ghWorkflow, ghIssuer, stmt, time.Now(), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyIdentity(r, id, logged, raw); err != nil {
		t.Fatalf("a logged signature of the identity: %v", err)
	}
	other, err := vs.AttestAtTime("https://github.com/mallory/x/.github/workflows/a.yml@refs/heads/main", ghIssuer, stmt, time.Now(), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyIdentity(r, id, other, raw); err == nil {
		t.Fatal("another subject's signature verified")
	}
}

func TestClusterRequirement(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pub, _ := newSigner(t).PublicPEM()
	keys := write("keys.pem", string(pub))
	fulcio, err := fulciotest.New()
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := fulcio.TrustedRoot()
	rootFile := write("trusted_root.json", string(rb))
	ids := write("identities.json", `[{"issuer":"`+ghIssuer+`","subject":"`+ghWorkflow+`"}]`)

	if r, root, err := LoadCluster("", "", ""); r != nil || root != nil || err != nil {
		t.Fatalf("nothing configured: %v %v %v", r, root, err)
	}
	r, _, err := LoadCluster(keys, ids, rootFile)
	if err != nil || len(r.Keys) != 1 || len(r.Identities) != 1 || r.Root == nil {
		t.Fatalf("keys and identities: %+v %v", r, err)
	}
	// Either meets the cluster's requirement.
	ref := pushRandom(t, true)
	b, err := fulcio.Bundle(ghIssuer, ghWorkflow, ref.DigestStr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify("test", ref.DigestStr(), []Found{{Manifest: "sha256:x", Bundle: b}}, Requirements{*r}); err != nil {
		t.Fatalf("the cluster's identity: %v", err)
	}
	for name, files := range map[string][3]string{
		"identities without a trusted root": {"", ids, ""},
		"not JSON":                          {"", write("bad.json", "issuer: x"), rootFile},
		"an unknown field":                  {"", write("unknown.json", `[{"issuer":"`+ghIssuer+`","subject":"a","subjectRegex":"b"}]`), rootFile},
		"an empty list":                     {"", write("empty.json", `[]`), rootFile},
		"both subject kinds":                {"", write("both.json", `[{"issuer":"`+ghIssuer+`","subject":"a","subjectRegExp":"b"}]`), rootFile},
	} {
		if _, _, err := LoadCluster(files[0], files[1], files[2]); vocab.ReasonOf(err) != vocab.ReasonSignatureInvalid {
			t.Errorf("%s: got %v", name, err)
		}
	}
	if _, _, err := LoadCluster("", "", write("root.json", "{}")); err == nil {
		t.Error("a trusted root without authorities accepted")
	}
}

// Different requirements never share a fingerprint, however their parts are spelled.
func TestFingerprintsDiffer(t *testing.T) {
	exact, _ := NewIdentity(ghIssuer, "/.*/", "")
	pattern, _ := NewIdentity(ghIssuer, "", ".*")
	a := Requirements{{Source: "s", Identities: []Identity{exact}}}
	b := Requirements{{Source: "s", Identities: []Identity{pattern}}}
	c := Requirements{{Source: "s from x", Identities: []Identity{exact}}}
	if a.Fingerprint() == b.Fingerprint() || a.Fingerprint() == c.Fingerprint() {
		t.Fatalf("fingerprints collide: %s %s %s", a.Fingerprint(), b.Fingerprint(), c.Fingerprint())
	}
	if a.Fingerprint() != (Requirements{{Source: "s", Identities: []Identity{exact}}}).Fingerprint() {
		t.Fatal("the same requirements give different fingerprints")
	}
}
