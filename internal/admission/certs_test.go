package admission

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"
)

var testPolicy = CertPolicy{CAValidity: 300 * time.Hour, CertValidity: 30 * time.Hour, Hosts: []string{"svc.ns.svc", "127.0.0.1"}}

func leafOf(t *testing.T, b Bundle) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// verifies reports whether the serving certificate chains to the bundle at time at.
func verifies(t *testing.T, b Bundle, at time.Time) bool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.CABundle) {
		t.Fatal("empty CA bundle")
	}
	_, err := leafOf(t, b).Verify(x509.VerifyOptions{Roots: pool, CurrentTime: at, DNSName: "svc.ns.svc"})
	return err == nil
}

func TestRenewLifecycle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, changed, err := Renew(Bundle{}, testPolicy, t0)
	if err != nil || !changed {
		t.Fatalf("first: changed=%v err=%v", changed, err)
	}
	if !verifies(t, b, t0) || len(parseCerts(b.CABundle)) != 1 {
		t.Fatal("fresh bundle does not verify")
	}
	if ip := leafOf(t, b).IPAddresses; len(ip) != 1 || ip[0].String() != "127.0.0.1" {
		t.Fatalf("IP SANs %v", ip)
	}
	// Nothing due: nothing changes (replicas and restarts write nothing).
	if _, changed, _ := Renew(b, testPolicy, t0.Add(19*time.Hour)); changed {
		t.Fatal("renewed with two thirds of the lifetime left")
	}
	// Serving certificate due (less than a third left): new leaf, same CA, bundle unchanged.
	b2, changed, _ := Renew(b, testPolicy, t0.Add(21*time.Hour))
	if !changed || bytes.Equal(b2.Cert, b.Cert) || !bytes.Equal(b2.CABundle, b.CABundle) || !bytes.Equal(b2.CAKey, b.CAKey) {
		t.Fatal("serving renewal should keep the CA")
	}
	// Hosts changed: reissued at once.
	p := testPolicy
	p.Hosts = []string{"other.ns.svc"}
	if b3, changed, _ := Renew(b2, p, t0.Add(22*time.Hour)); !changed || leafOf(t, b3).DNSNames[0] != "other.ns.svc" {
		t.Fatal("host change not reissued")
	}
	// CA due: a successor is published in front of the bundle, the current CA keeps
	// signing, and the serving certificate (still fresh) stays.
	at := t0.Add(201 * time.Hour)
	b4, _, _ := Renew(b2, testPolicy, at.Add(-5*time.Hour)) // serving renewed just before
	b5, changed, _ := Renew(b4, testPolicy, at)
	cas := parseCerts(b5.CABundle)
	if !changed || len(cas) != 2 || !bytes.Equal(b5.CAKey, b4.CAKey) || len(b5.NextCAKey) == 0 || !bytes.Equal(b5.Cert, b4.Cert) {
		t.Fatalf("CA rotation: changed=%v cas=%d", changed, len(cas))
	}
	if !verifies(t, b5, at) {
		t.Fatal("serving certificate no longer verifies during CA rotation")
	}
	// A serving renewal before promotion is still signed by the current CA: the API
	// server may not have loaded the bundle with the successor yet.
	noLeaf := b5
	noLeaf.Cert, noLeaf.Key = nil, nil
	early, _, _ := Renew(noLeaf, testPolicy, at.Add(9*time.Minute))
	if err := leafOf(t, early).CheckSignatureFrom(cas[1]); err != nil || !bytes.Equal(early.CAKey, b4.CAKey) {
		t.Fatalf("renewal before promotion not signed by the current CA: %v", err)
	}
	// After promoteDelay the successor signs; nothing else changes in that pass.
	promoted, changed, _ := Renew(b5, testPolicy, at.Add(11*time.Minute))
	if !changed || !bytes.Equal(promoted.CAKey, b5.NextCAKey) || len(promoted.NextCAKey) != 0 ||
		!bytes.Equal(promoted.Cert, b5.Cert) || !bytes.Equal(promoted.CABundle, b5.CABundle) {
		t.Fatal("successor not promoted cleanly")
	}
	// Next serving renewal moves to the new CA; it verifies against the bundle.
	b6, _, _ := Renew(promoted, testPolicy, at.Add(21*time.Hour))
	if bytes.Equal(b6.Cert, b5.Cert) || !verifies(t, b6, at.Add(21*time.Hour)) {
		t.Fatal("serving certificate not renewed under the new CA")
	}
	if err := leafOf(t, b6).CheckSignatureFrom(cas[0]); err != nil {
		t.Fatalf("renewed leaf not signed by the newest CA: %v", err)
	}
	// CA and serving certificate due in the same pass: the leaf is still signed by the
	// CA the API server already trusts.
	both, _, _ := Renew(b4, testPolicy, t0.Add(227*time.Hour))
	if cs := parseCerts(both.CABundle); len(cs) != 2 || leafOf(t, both).CheckSignatureFrom(cs[1]) != nil {
		t.Fatal("a leaf renewed with the CA rotation was signed by the unpublished CA")
	}
	// Once the old CA expires it leaves the bundle.
	b7, _, _ := Renew(b6, testPolicy, t0.Add(301*time.Hour))
	if n := len(parseCerts(b7.CABundle)); n != 1 {
		t.Fatalf("expired CA kept: %d CAs", n)
	}
}

func TestRenewReplacesGarbage(t *testing.T) {
	now := time.Now()
	good, _, _ := Renew(Bundle{}, testPolicy, now)
	other, _, _ := Renew(Bundle{}, testPolicy, now)
	for name, b := range map[string]Bundle{
		"garbage":                {CABundle: []byte("x"), CAKey: []byte("y"), Cert: []byte("z"), Key: []byte("w")},
		"CA key of another CA":   {CABundle: good.CABundle, CAKey: other.CAKey, Cert: good.Cert, Key: good.Key},
		"next key of another CA": {CABundle: good.CABundle, CAKey: other.CAKey, NextCAKey: other.CAKey, Cert: good.Cert, Key: good.Key},
		"leaf of another CA":     {CABundle: good.CABundle, CAKey: good.CAKey, Cert: other.Cert, Key: other.Key},
		"leaf with another key":  {CABundle: good.CABundle, CAKey: good.CAKey, Cert: good.Cert, Key: other.Key},
	} {
		out, changed, err := Renew(b, testPolicy, now)
		if err != nil || !changed || !verifies(t, out, now) {
			t.Fatalf("%s: changed=%v err=%v", name, changed, err)
		}
	}
	if _, _, err := Renew(Bundle{}, CertPolicy{}, now); err == nil {
		t.Fatal("no hosts accepted")
	}
}
