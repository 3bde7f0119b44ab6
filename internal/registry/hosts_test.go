package registry

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/vocab"
)

// seen records the requests a registry received.
type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (s *seen) wrap(prefix string) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.reqs = append(s.reqs, r.Clone(context.Background()))
			s.mu.Unlock()
			if prefix != "" {
				rest, ok := strings.CutPrefix(r.URL.Path, prefix)
				if !ok {
					http.NotFound(w, r)
					return
				}
				r.URL.Path = "/v2" + rest
			}
			h.ServeHTTP(w, r)
		})
	}
}

func (s *seen) all() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.reqs...)
}

// The node's hosts.toml decides where a pull goes and whom it trusts, read by containerd's
// own parser: a mirror known only from it, with its own CA (relative path), an API path of
// its own (override_path), a header, containerd's ns parameter; a host without the pull
// capability is never asked; a CA named for one host does not vouch for another.
func TestNodeHostsFollowsTheNodesConfiguration(t *testing.T) {
	originCA, mirrorCA := newCA(t, "origin-ca"), newCA(t, "mirror-ca")
	originLeaf, _ := originCA.Server("127.0.0.1")
	mirrorLeaf, _ := mirrorCA.Server("127.0.0.1")
	var atOrigin, atMirror, atResolver seen
	origin := tlsRegistry(t, originLeaf, atOrigin.wrap(""))
	mirror := tlsRegistry(t, mirrorLeaf, atMirror.wrap("/cache/v2"))
	resolver := tlsRegistry(t, mirrorLeaf, atResolver.wrap(""))

	// The image is pushed to both, with trust in both CAs.
	dir := t.TempDir()
	both, err := LoadTrust([]string{writeFile(t, filepath.Join(dir, "o.pem"), originCA.PEM), writeFile(t, filepath.Join(dir, "m.pem"), mirrorCA.PEM)})
	if err != nil {
		t.Fatal(err)
	}
	img := mustRandom(t)
	dg, _ := img.Digest()
	for _, host := range []string{hostOf(origin), hostOf(mirror)} {
		ref, _ := Reference(host+"/runtimes/x:1", false)
		rt := RequireTLS(TransportTLS(Timeouts{}, both.TLSConfig()), false)
		if host == hostOf(mirror) {
			rt = prefixTransport{base: rt, prefix: "/cache"}
		}
		if err := remote.Write(ref, img, remote.WithTransport(rt)); err != nil {
			t.Fatalf("push to %s: %v", host, err)
		}
	}

	certs := filepath.Join(t.TempDir(), "certs.d")
	originHost := hostOf(origin)
	hostDir := filepath.Join(certs, strings.Replace(originHost, ":", "_", 1)+"_")
	writeFile(t, filepath.Join(hostDir, "mirror-ca.pem"), mirrorCA.PEM)
	writeFile(t, filepath.Join(hostDir, "origin-ca.pem"), originCA.PEM)
	hostsToml := func(mirrorCAFile, originCAFile string) {
		writeFile(t, filepath.Join(hostDir, "hosts.toml"), []byte(fmt.Sprintf(`server = "https://%s"
ca = %q

[host."https://%s"]
  capabilities = ["resolve"]
  ca = "mirror-ca.pem"

[host."https://%s/cache/v2"]
  capabilities = ["pull", "resolve"]
  ca = %q
  override_path = true
  [host."https://%s/cache/v2".header]
    x-brewlet-test = "from-hosts-toml"
`, originHost, originCAFile, hostOf(resolver), hostOf(mirror), mirrorCAFile, hostOf(mirror))))
	}
	hostsToml("mirror-ca.pem", "origin-ca.pem")

	// No trust of its own beyond the system's: everything comes from hosts.toml.
	nh := NodeHosts{Dir: certs}
	if _, configured, err := nh.Sources(context.Background(), "registry.unconfigured.example"); configured || err != nil {
		t.Fatalf("a registry without configuration: configured=%v %v", configured, err)
	}
	sources, configured, err := nh.Sources(context.Background(), originHost)
	if err != nil || !configured {
		t.Fatalf("Sources: configured=%v %v", configured, err)
	}
	if len(sources) != 2 || sources[0].Host != hostOf(mirror) || sources[1].Host != originHost {
		t.Fatalf("sources %+v; want the pulling mirror, then the server", sources)
	}
	for i, s := range sources {
		ref, err := s.Digest("runtimes/x", dg.String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := remote.Get(ref, remote.WithTransport(s.Transport)); err != nil {
			t.Fatalf("source %d (%s): %v", i, s.Host, err)
		}
	}
	if len(atResolver.all()) != 0 {
		t.Errorf("a host without the pull capability was asked: %v", atResolver.all())
	}
	var manifest *http.Request
	for _, r := range atMirror.all() {
		if strings.Contains(r.URL.Path, "/manifests/") {
			manifest = r
		}
	}
	if manifest == nil || manifest.URL.Query().Get("ns") != originHost || manifest.Header.Get("x-brewlet-test") != "from-hosts-toml" ||
		!strings.HasPrefix(manifest.URL.Path, "/cache/v2/runtimes/x/") {
		t.Fatalf("the mirror's manifest request %+v; want /cache/v2/..., ns=%s and the configured header", manifest, originHost)
	}

	// Each host trusts its own CA only: swapped, both fail with the typed reason.
	hostsToml("origin-ca.pem", "mirror-ca.pem")
	sources, _, err = nh.Sources(context.Background(), originHost)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sources {
		ref, _ := s.Digest("runtimes/x", dg.String())
		_, err := remote.Get(ref, remote.WithTransport(s.Transport))
		if err = NodeHints.Classify(err, s.Host, ""); vocab.ReasonOf(err) != vocab.ReasonRegistryCertificateInvalid {
			t.Errorf("%s with another host's CA: %v; want RegistryCertificateInvalid", s.Host, err)
		}
	}

	// A CA file hosts.toml names but the node lacks: the configuration cannot be used.
	hostsToml("missing.pem", "origin-ca.pem")
	if _, _, err := nh.Sources(context.Background(), originHost); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("a missing CA file: %v", err)
	}
}

// prefixTransport sends /v2 requests under a path prefix (pushing to the mirror above).
type prefixTransport struct {
	base   http.RoundTripper
	prefix string
}

func (p prefixTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Path = p.prefix + r.URL.Path
	return p.base.RoundTrip(r)
}

func TestNamespaceParameter(t *testing.T) {
	for _, tc := range []struct{ host, registry, want string }{
		{"r.example", "r.example", ""},
		{"mirror.local:5000", "r.example", "r.example"},
		{"registry-1.docker.io", "docker.io", ""},
		{"mirror.local", "docker.io", "docker.io"},
	} {
		if got := nsOf(tc.host, tc.registry); got != tc.want {
			t.Errorf("nsOf(%q, %q) = %q, want %q", tc.host, tc.registry, got, tc.want)
		}
	}
}
