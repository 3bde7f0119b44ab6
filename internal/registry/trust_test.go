package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/testutil/testca"
	"brewlet.sh/brewlet/internal/vocab"
)

// tlsRegistry serves an in-memory registry over TLS with the leaf, wrapped by wrap (nil:
// as it is). Its address is 127.0.0.1:port.
func tlsRegistry(t *testing.T, leaf testca.Leaf, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	cert, err := leaf.TLS()
	if err != nil {
		t.Fatal(err)
	}
	h := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are what some tests want
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func hostOf(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "https://") }

func newCA(t *testing.T, name string) *testca.CA {
	t.Helper()
	ca, err := testca.New(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func writeFile(t *testing.T, path string, b []byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadTrustRefusesWhatItCannotUse(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "brewlet-unit-ca")
	good := writeFile(t, filepath.Join(dir, "ca.pem"), ca.PEM)
	key := writeFile(t, filepath.Join(dir, "key.pem"), []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"))
	junk := writeFile(t, filepath.Join(dir, "junk.pem"), []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	huge := writeFile(t, filepath.Join(dir, "huge.pem"), append(ca.PEM, make([]byte, maxCAFileBytes)...))
	for _, tc := range []struct {
		files  []string
		ok     bool
		reason vocab.Reason
	}{
		{nil, true, ""},
		{[]string{good}, true, ""},
		{[]string{good, filepath.Join(dir, "missing.pem")}, false, ""},
		{[]string{key}, false, ""},
		{[]string{junk}, false, ""},
		{[]string{huge}, false, vocab.ReasonLimitExceeded},
	} {
		tr, err := LoadTrust(tc.files)
		if (err == nil) != tc.ok || vocab.ReasonOf(err) != tc.reason {
			t.Errorf("LoadTrust(%v) = %v; want ok=%v reason %q", tc.files, err, tc.ok, tc.reason)
		}
		if err == nil && len(tc.files) > 0 {
			if _, err := ca.Cert.Verify(x509.VerifyOptions{Roots: tr.Pool()}); err != nil {
				t.Errorf("the added CA is not trusted: %v", err)
			}
		}
	}
}

// Each way a registry's identity can fail is the typed RegistryCertificateInvalid naming
// the host; refused credentials are RegistryCredentialsRefused; the right trust works.
func TestClassifyRegistryFailures(t *testing.T) {
	ca, other := newCA(t, "brewlet-unit-ca"), newCA(t, "brewlet-other-ca")
	dir := t.TempDir()
	caFile := writeFile(t, filepath.Join(dir, "ca.pem"), ca.PEM)
	otherFile := writeFile(t, filepath.Join(dir, "other.pem"), other.PEM)
	valid, _ := ca.Server("127.0.0.1")
	expired, _ := ca.Issue(time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour), x509.ExtKeyUsageServerAuth, "127.0.0.1")
	wrongName, _ := ca.Server("registry.elsewhere.example")
	authOnly := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != "puller" || p != "right" {
				w.Header().Set("WWW-Authenticate", `Basic realm="unit"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	for _, tc := range []struct {
		name   string
		leaf   testca.Leaf
		wrap   func(http.Handler) http.Handler
		trust  string
		reason vocab.Reason
		says   string
	}{
		{"trusted", valid, nil, caFile, "", ""},
		{"another authority", valid, nil, otherFile, vocab.ReasonRegistryCertificateInvalid, "no trusted authority"},
		{"system trust only", valid, nil, "", vocab.ReasonRegistryCertificateInvalid, "registry.caBundle"},
		{"expired", expired, nil, caFile, vocab.ReasonRegistryCertificateInvalid, "has expired"},
		{"another host name", wrongName, nil, caFile, vocab.ReasonRegistryCertificateInvalid, "another host name"},
		{"no credentials", valid, authOnly, caFile, vocab.ReasonRegistryCredentialsRefused, "HTTP 401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tlsRegistry(t, tc.leaf, tc.wrap)
			var files []string
			if tc.trust != "" {
				files = []string{tc.trust}
			}
			tr, err := LoadTrust(files)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := Reference(hostOf(srv)+"/runtimes/x:1", false)
			if err != nil {
				t.Fatal(err)
			}
			rt := RequireTLS(TransportTLS(Timeouts{}, tr.TLSConfig()), false)
			if tc.reason == "" {
				if err := remote.Write(ref, mustRandom(t), remote.WithTransport(rt)); err != nil {
					t.Fatalf("push to a trusted registry: %v", err)
				}
			}
			_, err = remote.Get(ref, remote.WithContext(context.Background()), remote.WithTransport(rt))
			err = NodeHints.Classify(err, hostOf(srv), "")
			if vocab.ReasonOf(err) != tc.reason || (tc.reason != "" && (!strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), hostOf(srv)))) {
				t.Fatalf("got %v; want reason %q saying %q and the host", err, tc.reason, tc.says)
			}
		})
	}
}

func mustRandom(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
