package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/internal/admission"
)

// legacyAdmissionSecret creates the certificate Secret as versions before one-shot CAs
// left it: a long-lived CA (an hour, so only the migration can retire it within the test)
// with its private key in ca.key, signing the serving certificate. It returns the CA.
func legacyAdmissionSecret(t *testing.T, c client.Client) *x509.Certificate {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "brewlet-pod-admission-ca-legacy"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject: pkix.Name{CommonName: "127.0.0.1"}, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(12 * time.Second),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ecPEM := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "brewlet-system", Name: admission.SecretName},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{
			admission.KeyCABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
			"ca.key":              ecPEM(caKey),
			admission.KeyCert:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
			admission.KeyKey:      ecPEM(key),
		}}
	if err := c.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	return ca
}

// admissionSecretProblem reads the certificate Secret and says what is wrong with it, ""
// if nothing: it may hold no key but the serving certificates' ("ca.key" once the legacy
// CA has left ca.crt), and no private key in it may belong to a CA of ca.crt.
func admissionSecretProblem(ctx context.Context, c client.Client, legacyCA *x509.Certificate) (string, error) {
	sec := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: admission.SecretName}, sec); err != nil {
		return "", err
	}
	var cas []*x509.Certificate
	for rest := sec.Data[admission.KeyCABundle]; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		ca, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return "", err
		}
		cas = append(cas, ca)
	}
	legacyTrusted := slices.ContainsFunc(cas, legacyCA.Equal)
	for k, v := range sec.Data {
		if !slices.Contains([]string{admission.KeyCABundle, admission.KeyCert, admission.KeyKey, admission.KeyNextCert, admission.KeyNextKey}, k) &&
			(k != "ca.key" || !legacyTrusted) {
			return fmt.Sprintf("key %s in the Secret (legacy CA still trusted: %v)", k, legacyTrusted), nil
		}
		blk, _ := pem.Decode(v)
		if blk == nil || blk.Type != "EC PRIVATE KEY" || k == "ca.key" {
			continue
		}
		priv, err := x509.ParseECPrivateKey(blk.Bytes)
		if err != nil {
			return "", err
		}
		for _, ca := range cas {
			if priv.PublicKey.Equal(ca.PublicKey) {
				return fmt.Sprintf("%s is the private key of CA %s", k, ca.Subject.CommonName), nil
			}
		}
	}
	return "", nil
}
