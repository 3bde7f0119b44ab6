// Package fulciotest is a private keyless-signing certificate authority for tests: it issues
// short code-signing certificates naming an OIDC issuer and a subject, as Fulcio does, writes
// the Sigstore trusted root that trusts it, and signs image digests with such certificates
// into Sigstore bundles (the form cosign sign --new-bundle-format writes).
package fulciotest

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"google.golang.org/protobuf/encoding/protojson"

	"brewlet.sh/brewlet/internal/testutil/testca"
)

// oidIssuerV2 is Fulcio's extension naming the OIDC issuer (an ASN.1 UTF8String).
var oidIssuerV2 = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 8}

// CA is a certificate authority of keyless signing certificates.
type CA struct{ ca *testca.CA }

// New makes a CA (testca's: valid from 30 days ago for 30 days more).
func New() (*CA, error) {
	ca, err := testca.New("brewlet-e2e-fulcio")
	if err != nil {
		return nil, err
	}
	return &CA{ca: ca}, nil
}

// TrustedRoot is the trusted_root.json that trusts the CA (no transparency log, no
// timestamp authority: certificates are checked at the current time).
func (ca *CA) TrustedRoot() ([]byte, error) {
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01,
		[]root.CertificateAuthority{&root.FulcioCertificateAuthority{Root: ca.ca.Cert, ValidityPeriodStart: ca.ca.Cert.NotBefore}}, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	return tr.MarshalJSON()
}

// Bundle signs digest (sha256:<hex>) as subject (an e-mail address or a URI) vouched for by
// issuer: an ephemeral key, a certificate for it from the CA, a DSSE envelope of the in-toto
// statement cosign's "sign" makes.
func (ca *CA) Bundle(issuer, subject, digest string) ([]byte, error) {
	alg, hexd, ok := strings.Cut(digest, ":")
	if !ok {
		return nil, fmt.Errorf("%q is not a digest", digest)
	}
	stmt, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []map[string]any{{"digest": map[string]string{alg: hexd}}},
		"predicateType": "https://sigstore.dev/cosign/sign/v1",
	})
	if err != nil {
		return nil, err
	}
	kp, err := sign.NewEphemeralKeypair(nil)
	if err != nil {
		return nil, err
	}
	b, err := sign.Bundle(&sign.DSSEData{Data: stmt, PayloadType: "application/vnd.in-toto+json"}, kp,
		sign.BundleOptions{CertificateProvider: issuerFor{ca, issuer, subject}})
	if err != nil {
		return nil, err
	}
	return protojson.Marshal(b)
}

type issuerFor struct {
	ca              *CA
	issuer, subject string
}

func (i issuerFor) GetCertificate(_ context.Context, kp sign.Keypair, _ *sign.CertificateProviderOptions) ([]byte, error) {
	ext, err := asn1.MarshalWithParams(i.issuer, "utf8")
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{NotBefore: time.Now().Add(-time.Minute),
		NotAfter: time.Now().Add(10 * time.Minute), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}, ExtraExtensions: []pkix.Extension{{Id: oidIssuerV2, Value: ext}}}
	if strings.Contains(i.subject, "@") && !strings.Contains(i.subject, "://") {
		tmpl.EmailAddresses = []string{i.subject}
	} else {
		u, err := url.Parse(i.subject)
		if err != nil {
			return nil, err
		}
		tmpl.URIs = []*url.URL{u}
	}
	return i.ca.ca.Sign(tmpl, kp.GetPublicKey())
}
