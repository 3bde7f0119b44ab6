package signature

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"google.golang.org/protobuf/encoding/protojson"
)

// Signer signs digests with one ECDSA P-256 key, the kind cosign generate-key-pair makes.
type Signer struct {
	priv *ecdsa.PrivateKey
}

// GenerateKey makes a new signing key.
func GenerateKey() (*Signer, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &Signer{priv: k}, nil
}

// LoadSigner reads an unencrypted PEM private key (PKCS#8 "PRIVATE KEY" or SEC 1 "EC
// PRIVATE KEY"), ECDSA P-256.
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s holds no PEM block", path)
	}
	var key any
	switch blk.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("%s: a PEM block of type %q; an unencrypted ECDSA P-256 key is needed (cosign's encrypted keys sign with cosign itself)", path, blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%s: not an ECDSA P-256 key", path)
	}
	return &Signer{priv: ec}, nil
}

// PrivatePEM is the key as PKCS#8 PEM.
func (s *Signer) PrivatePEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(s.priv)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// PublicPEM is the public key as PEM, what a requirement names.
func (s *Signer) PublicPEM() ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(&s.priv.PublicKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// KeyID is the public key's fingerprint (Key.ID).
func (s *Signer) KeyID() string {
	sum, _ := keySum(&s.priv.PublicKey) // an ECDSA P-256 key always encodes
	return sum[:16]
}

// Bundle returns a Sigstore bundle (JSON) signing digest (sha256:<hex>): a DSSE envelope
// of an in-toto statement naming the digest, predicate SignPredicateType, as cosign sign
// --new-bundle-format makes it. No transparency log entry: the key is the trust anchor.
func (s *Signer) Bundle(digest string) ([]byte, error) {
	stmt, err := statement(digest, SignPredicateType)
	if err != nil {
		return nil, err
	}
	return s.bundleOf(stmt)
}

func statement(digest, predicate string) ([]byte, error) {
	alg, hexd, ok := strings.Cut(digest, ":")
	if !ok || alg != "sha256" || len(hexd) != 64 {
		return nil, fmt.Errorf("%q is not a sha256 digest", digest)
	}
	return json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []map[string]any{{"digest": map[string]string{alg: hexd}}},
		"predicateType": predicate,
	})
}

func (s *Signer) bundleOf(stmt []byte) ([]byte, error) {
	b, err := sign.Bundle(&sign.DSSEData{Data: stmt, PayloadType: "application/vnd.in-toto+json"}, keypair{s}, sign.BundleOptions{})
	if err != nil {
		return nil, err
	}
	return protojson.Marshal(b)
}

// Attach pushes bundle as an OCI referrer of ref's digest (artifact type BundleMediaType;
// go-containerregistry also updates the referrers tag where the registry has no referrers
// API). It returns the referrer manifest's digest.
func Attach(ctx context.Context, ref name.Digest, bundle []byte, opts ...remote.Option) (string, error) {
	opts = append(append([]remote.Option{}, opts...), remote.WithContext(ctx))
	subject, err := remote.Head(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", ref, err)
	}
	empty := static.NewLayer([]byte("{}"), emptyMediaType)
	layer := static.NewLayer(bundle, BundleMediaType)
	for _, l := range []v1.Layer{empty, layer} {
		if err := remote.WriteLayer(ref.Context(), l, opts...); err != nil {
			return "", fmt.Errorf("push to %s: %w", ref.Context(), err)
		}
	}
	cd, _ := empty.Digest()
	ld, _ := layer.Digest()
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  BundleMediaType,
		Config:        v1.Descriptor{MediaType: emptyMediaType, Digest: cd, Size: 2},
		Layers:        []v1.Descriptor{{MediaType: BundleMediaType, Digest: ld, Size: int64(len(bundle))}},
		Subject:       &v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size},
		Annotations:   map[string]string{"dev.sigstore.bundle.content": "dsse-envelope", "dev.sigstore.bundle.predicateType": SignPredicateType},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	h, _, err := v1.SHA256(strings.NewReader(string(raw)))
	if err != nil {
		return "", err
	}
	if err := remote.Put(ref.Context().Digest(h.String()), rawManifest(raw), opts...); err != nil {
		return "", fmt.Errorf("push the signature of %s: %w", ref, err)
	}
	return h.String(), nil
}

type rawManifest []byte

func (r rawManifest) RawManifest() ([]byte, error)        { return r, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// keypair adapts a Signer to sigstore-go's signing interface.
type keypair struct{ s *Signer }

func (k keypair) GetHashAlgorithm() protocommon.HashAlgorithm {
	return protocommon.HashAlgorithm_SHA2_256
}
func (k keypair) GetSigningAlgorithm() protocommon.PublicKeyDetails {
	return protocommon.PublicKeyDetails_PKIX_ECDSA_P256_SHA_256
}
func (k keypair) GetHint() []byte                  { return []byte(k.s.KeyID()) }
func (k keypair) GetKeyAlgorithm() string          { return "ECDSA" }
func (k keypair) GetPublicKey() crypto.PublicKey   { return &k.s.priv.PublicKey }
func (k keypair) GetPublicKeyPem() (string, error) { b, err := k.s.PublicPEM(); return string(b), err }
func (k keypair) SignData(_ context.Context, data []byte) ([]byte, []byte, error) {
	sum := sha256.Sum256(data)
	sig, err := ecdsa.SignASN1(rand.Reader, k.s.priv, sum[:])
	return sig, sum[:], err
}
