package admission

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"time"
)

// Keys of the serving-certificate Secret. tls.crt/tls.key are the kubernetes.io/tls
// names, so the Secret is also usable by anything that expects that type. No key of the
// Secret holds a CA's private key: every CA signs one serving certificate and its key is
// forgotten at once (docs/security.md, "The webhook CA's key").
const (
	KeyCABundle = "ca.crt"       // PEM: every CA still trusted, newest first; the webhook caBundle
	KeyCert     = "tls.crt"      // PEM: the serving certificate every replica serves
	KeyKey      = "tls.key"      // PEM: its key
	KeyNextCert = "tls-next.crt" // PEM: the successor, its CA already in ca.crt, served after promoteDelay
	KeyNextKey  = "tls-next.key" // PEM: its key
)

// legacyCAKeys are where versions before one-shot CAs kept the CA private keys. They are
// kept only while the CA they belong to is still in the bundle (then removed in the write
// that drops the CA): until then the CA is trusted anyway, and a replica of the old version
// still running during a rolling upgrade keeps signing instead of starting over with a CA
// of its own, which would swap the caBundle under the new replicas.
var legacyCAKeys = []string{"ca.key", "ca-next.key"}

// Bundle is the PKI pod admission is served with, as stored in the Secret.
type Bundle struct {
	CABundle, Cert, Key, NextCert, NextKey []byte
}

// CertPolicy says how long certificates live and whom the serving certificate names.
type CertPolicy struct {
	CertValidity time.Duration // default 90 days; each certificate's CA lives exactly as long
	// Resync: how often every replica reads the Secret (default 1 minute). A retired CA
	// stays trusted for a few of these, so every replica has moved off it first.
	Resync time.Duration
	// Hosts: DNS names and IP addresses the API server dials (the Service's names; tests:
	// 127.0.0.1).
	Hosts []string
}

func (p CertPolicy) withDefaults() CertPolicy {
	if p.CertValidity <= 0 {
		p.CertValidity = 90 * 24 * time.Hour
	}
	if p.Resync <= 0 {
		p.Resync = time.Minute
	}
	return p
}

// clockSkew backdates certificates so an API server whose clock is a little behind the
// operator's accepts them at once.
const clockSkew = 5 * time.Minute

// promoteDelay is how long a successor's CA is only published before its certificate is
// served: long enough for every API server to load the new caBundle. Minutes for real
// lifetimes, shorter for the seconds tests use; always well under the third of a lifetime
// renewal leaves.
func promoteDelay(p CertPolicy) time.Duration {
	return min(10*time.Minute, p.CertValidity/10)
}

// retireGrace is how long a CA that signs neither the served nor the staged certificate
// stays in the bundle after the served one could first have been promoted: replicas that
// have not read the Secret since still serve the certificate it signed.
func retireGrace(p CertPolicy) time.Duration {
	return max(promoteDelay(p), 3*p.Resync)
}

// serving is a usable certificate of the Secret and the CA in the bundle that signed it.
type serving struct {
	leaf, issuer *x509.Certificate
}

// issued is when the certificate was made (NotBefore is backdated by clockSkew).
func (s *serving) issued() time.Time { return s.leaf.NotBefore.Add(clockSkew) }

// due: less than a third of its lifetime is left (a stopped operator has a long window to
// come back), or its CA outlives it, which only a CA of an earlier version does, one that
// signed many certificates with a key kept in the Secret: such a CA is retired at once.
func (s *serving) due(p CertPolicy, now time.Time) bool {
	return s.leaf.NotAfter.Sub(now) < p.CertValidity/3 || s.issuer.NotAfter.After(s.leaf.NotAfter)
}

// Renew returns the bundle to store and whether it differs from b. Rules:
//   - no CA key is ever stored: each serving certificate gets a fresh CA that signs it and
//     is forgotten (issueOneShot). Any replica can therefore take over every step below
//     from what the Secret holds, and nothing that reads the Secret can mint a certificate;
//   - a due certificate gets a successor that is only staged: its CA goes in front of the
//     caBundle while the current certificate is still served. After promoteDelay, long
//     enough for every API server to load the new caBundle, the successor is served, so no
//     API server meets a certificate from a CA it does not trust yet;
//   - a CA leaves the bundle when it expires (with its certificate), or retireGrace after
//     it stopped signing the served or staged certificate;
//   - anything unreadable, mismatched (names) or expired is replaced at once, never trusted.
func Renew(b Bundle, p CertPolicy, now time.Time) (Bundle, bool, error) {
	p = p.withDefaults()
	cas := unexpiredCAs(b.CABundle, now)
	cur := servingOf(b.Cert, b.Key, cas, p, now)
	next := servingOf(b.NextCert, b.NextKey, cas, p, now)
	out := Bundle{Cert: b.Cert, Key: b.Key}
	if next != nil {
		out.NextCert, out.NextKey = b.NextCert, b.NextKey
	}
	promote := func() {
		cur, out.Cert, out.Key = next, out.NextCert, out.NextKey
		next, out.NextCert, out.NextKey = nil, nil, nil
	}
	switch {
	case cur == nil && next != nil:
		promote() // its CA is at least published, unlike a fresh one's
	case cur == nil: // first run, or nothing usable: served at once
		s, crt, key, err := issueOneShot(p, now)
		if err != nil {
			return b, false, err
		}
		cas, cur, out.Cert, out.Key = append([]*x509.Certificate{s.issuer}, cas...), s, crt, key
	}
	if next == nil && cur.due(p, now) {
		s, crt, key, err := issueOneShot(p, now)
		if err != nil {
			return b, false, err
		}
		cas, next, out.NextCert, out.NextKey = append([]*x509.Certificate{s.issuer}, cas...), s, crt, key
	}
	if next != nil && now.Sub(next.issued()) >= promoteDelay(p) {
		promote()
	}
	out.CABundle = certsPEM(retainCAs(cas, cur, next, p, now))
	changed := !bytes.Equal(out.CABundle, b.CABundle) || !bytes.Equal(out.Cert, b.Cert) || !bytes.Equal(out.Key, b.Key) ||
		!bytes.Equal(out.NextCert, b.NextCert) || !bytes.Equal(out.NextKey, b.NextKey)
	return out, changed, nil
}

// RenewSecret is Renew on the Secret's data. The result holds only the keys this version
// writes (legacyCAKeys while their CA is still trusted); anything else, notably a CA key an
// earlier version stored, is dropped, and dropped lists it. changed says a write is due.
func RenewSecret(data map[string][]byte, p CertPolicy, now time.Time) (out map[string][]byte, changed bool, dropped []string, err error) {
	b, _, err := Renew(Bundle{CABundle: data[KeyCABundle], Cert: data[KeyCert], Key: data[KeyKey],
		NextCert: data[KeyNextCert], NextKey: data[KeyNextKey]}, p, now)
	if err != nil {
		return nil, false, nil, err
	}
	out = map[string][]byte{KeyCABundle: b.CABundle, KeyCert: b.Cert, KeyKey: b.Key}
	if len(b.NextCert) > 0 {
		out[KeyNextCert], out[KeyNextKey] = b.NextCert, b.NextKey
	}
	trusted := parseCerts(b.CABundle)
	for _, k := range legacyCAKeys {
		if pub := ecPublicKeyOf(data[k]); pub != nil && slices.ContainsFunc(trusted, func(c *x509.Certificate) bool { return pub.Equal(c.PublicKey) }) {
			out[k] = data[k]
		}
	}
	for k := range data {
		if _, kept := out[k]; !kept && !slices.Contains([]string{KeyNextCert, KeyNextKey}, k) {
			dropped = append(dropped, k)
		}
	}
	slices.Sort(dropped)
	return out, !equalData(data, out), dropped, nil
}

func equalData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// retainCAs keeps, in order and once each, the CAs of the served and staged certificates
// and, until retireGrace after the served one could first have been promoted, the others.
func retainCAs(cas []*x509.Certificate, cur, next *serving, p CertPolicy, now time.Time) []*x509.Certificate {
	grace := now.Before(cur.issued().Add(promoteDelay(p) + retireGrace(p)))
	var out []*x509.Certificate
	for _, c := range cas {
		signs := c == cur.issuer || (next != nil && c == next.issuer)
		if (signs || grace) && !slices.ContainsFunc(out, func(o *x509.Certificate) bool { return o.Equal(c) }) {
			out = append(out, c)
		}
	}
	return out
}

// unexpiredCAs returns the bundle's CA certificates that have not expired, in order.
func unexpiredCAs(bundle []byte, now time.Time) []*x509.Certificate {
	var cas []*x509.Certificate
	for _, c := range parseCerts(bundle) {
		if c.IsCA && now.Before(c.NotAfter) {
			cas = append(cas, c)
		}
	}
	return cas
}

// servingOf returns the certificate and key as a usable serving certificate: they match,
// it names exactly the policy's hosts, and it chains to a CA of cas at now; nil otherwise.
func servingOf(crt, key []byte, cas []*x509.Certificate, p CertPolicy, now time.Time) *serving {
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil || len(pair.Certificate) == 0 {
		return nil
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil
	}
	dns, ips := splitHosts(p.Hosts)
	if !slices.Equal(leaf.DNSNames, dns) || !slices.EqualFunc(leaf.IPAddresses, ips, net.IP.Equal) {
		return nil
	}
	for _, ca := range cas {
		pool := x509.NewCertPool()
		pool.AddCert(ca)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			return &serving{leaf: leaf, issuer: ca}
		}
	}
	return nil
}
