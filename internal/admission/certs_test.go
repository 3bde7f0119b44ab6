package admission

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"maps"
	"net"
	"slices"
	"testing"
	"time"
)

// testPolicy: renewal at 20h, promoteDelay 10 minutes, retireGrace 10 minutes.
var testPolicy = CertPolicy{CertValidity: 30 * time.Hour, Resync: time.Minute, Hosts: []string{"svc.ns.svc", "127.0.0.1"}}

func leafOf(t *testing.T, crt, key []byte) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// verifies reports whether the certificate chains to the bundle at time at.
func verifies(t *testing.T, bundle, crt, key []byte, at time.Time) bool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("empty CA bundle")
	}
	_, err := leafOf(t, crt, key).Verify(x509.VerifyOptions{Roots: pool, CurrentTime: at, DNSName: "svc.ns.svc"})
	return err == nil
}

// assertNoCAKey fails if a private key in data belongs to a CA of the bundle, other than
// the legacy keys allowed (kept while their CA is trusted).
func assertNoCAKey(t *testing.T, data map[string][]byte, allowed ...string) {
	t.Helper()
	for k, v := range data {
		pub := ecPublicKeyOf(v)
		if pub == nil || slices.Contains(allowed, k) {
			continue
		}
		for _, c := range parseCerts(data[KeyCABundle]) {
			if pub.Equal(c.PublicKey) {
				t.Fatalf("Secret key %s is the private key of CA %s", k, c.Subject.CommonName)
			}
		}
	}
}

// legacySecret is what versions before one-shot CAs stored: a long-lived CA with its key
// in ca.key, signing the serving certificate.
func legacySecret(t *testing.T, caLife, leafLife time.Duration, now time.Time) map[string][]byte {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "brewlet-pod-admission-ca-legacy"},
		NotBefore: now.Add(-clockSkew), NotAfter: now.Add(caLife), KeyUsage: x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	dns, ips := splitHosts(testPolicy.Hosts)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: serial(),
		NotBefore: now.Add(-clockSkew), NotAfter: now.Add(leafLife), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: dns, IPAddresses: ips}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caKeyPEM, _ := keyPEM(caKey)
	keyPEMBytes, _ := keyPEM(key)
	return map[string][]byte{KeyCABundle: certsPEM([]*x509.Certificate{ca}), "ca.key": caKeyPEM,
		KeyCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyKey: keyPEMBytes}
}

// renew is RenewSecret that must succeed.
func renew(t *testing.T, data map[string][]byte, p CertPolicy, at time.Time) map[string][]byte {
	t.Helper()
	out, _, _, err := RenewSecret(data, p, at)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func with(data map[string][]byte, kv ...string) map[string][]byte {
	out := maps.Clone(data)
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = []byte(kv[i+1])
	}
	return out
}

func TestRenewSecret(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	due := t0.Add(21 * time.Hour)
	// One rotation, step by step: each state is the previous one renewed.
	fresh := renew(t, nil, testPolicy, t0)
	staged := renew(t, fresh, testPolicy, due)
	promoted := renew(t, staged, testPolicy, due.Add(11*time.Minute))
	// An old-format Secret and its migration.
	legacy := legacySecret(t, 300*time.Hour, 30*time.Hour, t0)
	legacyStaged := renew(t, legacy, testPolicy, t0.Add(time.Hour))
	legacyPromoted := renew(t, legacyStaged, testPolicy, t0.Add(time.Hour+11*time.Minute))

	other := renew(t, nil, testPolicy, t0)
	hosts := testPolicy
	hosts.Hosts = []string{"other.ns.svc"}
	expiredCA := renew(t, nil, CertPolicy{CertValidity: time.Hour, Hosts: testPolicy.Hosts}, t0.Add(-2*time.Hour))

	type want struct {
		changed  bool
		cas      int      // CAs in the bundle
		served   []byte   // the certificate served afterwards (nil: a new one)
		staged   bool     // a successor is staged
		stagedAs []byte   // and it is this one (nil: any)
		legacy   bool     // ca.key is still there
		dropped  []string // keys removed
	}
	for _, tc := range []struct {
		name  string
		in    map[string][]byte
		p     CertPolicy
		at    time.Time
		want  want
		check func(t *testing.T, out map[string][]byte)
	}{
		{name: "fresh: empty Secret", in: nil, at: t0,
			want: want{changed: true, cas: 1}},
		{name: "nothing due: no write", in: fresh, at: t0.Add(19 * time.Hour),
			want: want{cas: 1, served: fresh[KeyCert]}},
		{name: "due: successor staged, its CA published in front, the current one still served", in: fresh, at: due,
			want: want{changed: true, cas: 2, served: fresh[KeyCert], staged: true},
			check: func(t *testing.T, out map[string][]byte) {
				if leafOf(t, out[KeyNextCert], out[KeyNextKey]).CheckSignatureFrom(parseCerts(out[KeyCABundle])[0]) != nil {
					t.Error("the staged certificate's CA is not first in the bundle")
				}
			}},
		{name: "staged, before promoteDelay: nothing moves", in: staged, at: due.Add(9 * time.Minute),
			want: want{cas: 2, served: fresh[KeyCert], staged: true, stagedAs: staged[KeyNextCert]}},
		{name: "staged, after promoteDelay: successor served, both CAs trusted (overlap)", in: staged, at: due.Add(11 * time.Minute),
			want: want{changed: true, cas: 2, served: staged[KeyNextCert]}},
		{name: "overlap holds during retireGrace", in: promoted, at: due.Add(19 * time.Minute),
			want: want{cas: 2, served: staged[KeyNextCert]}},
		{name: "superseded CA pruned after retireGrace", in: promoted, at: due.Add(21 * time.Minute),
			want: want{changed: true, cas: 1, served: staged[KeyNextCert]}},
		{name: "served certificate expired with a successor staged: promoted at once", in: staged, at: t0.Add(31 * time.Hour),
			want: want{changed: true, cas: 1, served: staged[KeyNextCert]}},
		{name: "expired CA and certificate: replaced, the expired CA pruned", in: expiredCA, at: t0,
			want: want{changed: true, cas: 1}},
		{name: "names changed: reissued at once", in: promoted, p: hosts, at: due.Add(12 * time.Minute),
			want: want{changed: true, cas: 3},
			check: func(t *testing.T, out map[string][]byte) {
				if n := leafOf(t, out[KeyCert], out[KeyKey]).DNSNames; !slices.Equal(n, []string{"other.ns.svc"}) {
					t.Errorf("names %v", n)
				}
			}},
		{name: "old-format Secret: rotated to a one-shot CA, CA key kept while its CA is trusted", in: legacy, at: t0.Add(time.Hour),
			want: want{changed: true, cas: 2, served: legacy[KeyCert], staged: true, legacy: true}},
		{name: "old-format Secret promoted: the old CA still trusted for the replicas that lag", in: legacyStaged, at: t0.Add(time.Hour + 11*time.Minute),
			want: want{changed: true, cas: 2, served: legacyStaged[KeyNextCert], legacy: true}},
		{name: "old-format Secret after retireGrace: the old CA and its key removed together", in: legacyPromoted, at: t0.Add(time.Hour + 21*time.Minute),
			want: want{changed: true, cas: 1, served: legacyStaged[KeyNextCert], dropped: []string{"ca.key"}}},
		{name: "old-format CA key of no trusted CA: removed at once", in: with(fresh, "ca.key", string(other[KeyKey]), "ca-next.key", "junk"), at: t0.Add(time.Hour),
			want: want{changed: true, cas: 1, served: fresh[KeyCert], dropped: []string{"ca-next.key", "ca.key"}}},
		{name: "a key nobody writes: removed", in: with(fresh, "extra", "x"), at: t0.Add(time.Hour),
			want: want{changed: true, cas: 1, served: fresh[KeyCert], dropped: []string{"extra"}}},
		{name: "garbage: replaced", in: map[string][]byte{KeyCABundle: []byte("x"), KeyCert: []byte("z"), KeyKey: []byte("w"), KeyNextCert: []byte("y")}, at: t0,
			want: want{changed: true, cas: 1}},
		{name: "certificate of another CA: replaced", in: with(fresh, KeyCert, string(other[KeyCert]), KeyKey, string(other[KeyKey])), at: t0,
			want: want{changed: true, cas: 2}},
		{name: "certificate with another key: replaced", in: with(fresh, KeyKey, string(other[KeyKey])), at: t0,
			want: want{changed: true, cas: 2}},
		{name: "staged certificate of an unpublished CA: dropped, not served", in: with(fresh, KeyNextCert, string(other[KeyCert]), KeyNextKey, string(other[KeyKey])),
			at: due.Add(time.Hour), want: want{changed: true, cas: 2, served: fresh[KeyCert], staged: true},
			check: func(t *testing.T, out map[string][]byte) {
				if bytes.Equal(out[KeyNextCert], other[KeyCert]) {
					t.Error("kept a staged certificate no bundle CA signed")
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy
			if tc.p.Hosts != nil {
				p = tc.p
			}
			out, changed, dropped, err := RenewSecret(tc.in, p, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			if changed != w.changed {
				t.Errorf("changed %v, want %v", changed, w.changed)
			}
			if !changed && !equalData(out, tc.in) {
				t.Error("unchanged but the data differs")
			}
			if n := len(parseCerts(out[KeyCABundle])); n != w.cas {
				t.Errorf("%d CAs in the bundle, want %d", n, w.cas)
			}
			if w.served != nil && !bytes.Equal(out[KeyCert], w.served) {
				t.Error("serves another certificate than expected")
			}
			if w.served == nil && tc.in != nil && bytes.Equal(out[KeyCert], tc.in[KeyCert]) {
				t.Error("kept the certificate it should replace")
			}
			if got := len(out[KeyNextCert]) > 0 && len(out[KeyNextKey]) > 0; got != w.staged {
				t.Errorf("staged %v, want %v", got, w.staged)
			}
			if w.stagedAs != nil && !bytes.Equal(out[KeyNextCert], w.stagedAs) {
				t.Error("staged another successor")
			}
			if _, ok := out["ca.key"]; ok != w.legacy {
				t.Errorf("ca.key kept %v, want %v", ok, w.legacy)
			}
			if !slices.Equal(dropped, w.dropped) {
				t.Errorf("dropped %v, want %v", dropped, w.dropped)
			}
			// Always: the served certificate chains to the bundle and names the hosts, and
			// no key of the Secret can sign for a CA the bundle trusts (but a legacy one
			// on its way out).
			if !verifies(t, out[KeyCABundle], out[KeyCert], out[KeyKey], tc.at) && p.Hosts[0] == "svc.ns.svc" {
				t.Error("served certificate does not verify against the bundle")
			}
			if w.staged && !verifies(t, out[KeyCABundle], out[KeyNextCert], out[KeyNextKey], tc.at) {
				t.Error("staged certificate does not verify against the bundle")
			}
			assertNoCAKey(t, out, "ca.key")
			for k := range out {
				if !slices.Contains([]string{KeyCABundle, KeyCert, KeyKey, KeyNextCert, KeyNextKey, "ca.key"}, k) {
					t.Errorf("unexpected key %s", k)
				}
			}
			if tc.check != nil {
				tc.check(t, out)
			}
		})
	}
}

// TestOneShotCA: each serving certificate has a CA of its own, valid exactly as long, that
// can sign nothing but certificates of depth zero.
func TestOneShotCA(t *testing.T) {
	now := time.Now()
	s, crt, key, err := issueOneShot(testPolicy, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf := leafOf(t, crt, key)
	if !s.issuer.NotAfter.Equal(leaf.NotAfter) || !s.issuer.NotBefore.Equal(leaf.NotBefore) || !s.issuer.MaxPathLenZero ||
		s.issuer.KeyUsage != x509.KeyUsageCertSign {
		t.Fatalf("CA %v–%v pathlen0=%v usage=%v, certificate %v–%v", s.issuer.NotBefore, s.issuer.NotAfter,
			s.issuer.MaxPathLenZero, s.issuer.KeyUsage, leaf.NotBefore, leaf.NotAfter)
	}
	if s.due(testPolicy, now) {
		t.Fatal("a fresh certificate is due")
	}
	if ip := leaf.IPAddresses; len(ip) != 1 || !ip[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Fatalf("IP SANs %v", ip)
	}
	if _, _, _, err := issueOneShot(CertPolicy{CertValidity: time.Hour}, now); err == nil {
		t.Fatal("no hosts accepted")
	}
	if promoteDelay(CertPolicy{}.withDefaults()) != 10*time.Minute || promoteDelay(testPolicy) >= testPolicy.CertValidity/3 {
		t.Fatal("promoteDelay out of bounds")
	}
}
