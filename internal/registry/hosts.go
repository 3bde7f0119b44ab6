package registry

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
)

// Source is one place an image is pulled from: a mirror or the registry itself, with the
// transport that reaches it as the node's configuration says.
type Source struct {
	Host string // host[:port]
	// PlainHTTP: the node's configuration names this host with http:// (the
	// administrator's explicit choice, as containerd honours it for the node's images).
	PlainHTTP bool
	Transport http.RoundTripper
}

// Digest names repo@digest on this source.
func (s Source) Digest(repo, digest string) (name.Digest, error) {
	return Digest(s.Host+"/"+repo+"@"+digest, s.PlainHTTP)
}

// NodeHosts reads the node's containerd registry host configuration (the directory CRI's
// registry config_path names, one certs.d/<host>/hosts.toml per registry) with containerd's
// own parser, so that runtime images come through the same mirrors, with the same
// authorities, client certificates, skip_verify, override_path and headers as the node's
// ordinary images.
type NodeHosts struct {
	Dir      string // "" or a missing directory: no node configuration
	Trust    *Trust
	Timeouts Timeouts
}

// Sources returns the hosts the node's configuration gives for registry, in containerd's
// order (mirrors, then the server), keeping those that may pull; configured is false when the
// node has no hosts.toml (and no certificate directory) for registry nor a _default one.
func (h NodeHosts) Sources(ctx context.Context, registry string) (sources []Source, configured bool, err error) {
	if h.Dir == "" {
		return nil, false, nil
	}
	hostDir := config.HostDirFromRoot(h.Dir)
	if _, err := hostDir(registry); errdefs.IsNotFound(err) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, fmt.Errorf("registry host configuration for %s in %s: %w", registry, h.Dir, err)
	}
	hosts, err := config.ConfigureHosts(ctx, config.HostOptions{
		HostDir: hostDir,
		// https for a server the file does not name, loopback included: containerd would
		// default a loopback registry to plain HTTP with verification off.
		DefaultScheme: "https",
		UpdateClient:  h.client,
	})(registry)
	if err != nil {
		return nil, true, fmt.Errorf("registry host configuration for %s in %s: %w", registry, h.Dir, err)
	}
	for _, rh := range hosts {
		if rh.Capabilities&docker.HostCapabilityPull == 0 {
			continue
		}
		sources = append(sources, Source{Host: rh.Host, PlainHTTP: rh.Scheme == "http",
			Transport: &hostRewrite{base: rh.Client.Transport, other: RequireTLS(rh.Client.Transport, false),
				scheme: rh.Scheme, host: rh.Host, path: rh.Path, header: rh.Header, ns: nsOf(rh.Host, registry)}})
	}
	if len(sources) == 0 {
		return nil, true, fmt.Errorf("registry host configuration for %s in %s gives no host that may pull (capabilities = [\"pull\", ...])", registry, h.Dir)
	}
	return sources, true, nil
}

// nsOf is the ns parameter containerd sends a host serving registry's images: none to the
// registry itself (Docker Hub's API host counting as docker.io), the registry's name to any
// other.
func nsOf(host, registry string) string {
	if host == registry || (registry == "docker.io" && host == "registry-1.docker.io") {
		return ""
	}
	return registry
}

// client replaces the transport containerd built for a host with Brewlet's (timeouts, stall
// detection), keeping the TLS configuration containerd derived from the host's settings. A
// host without authorities of its own trusts what the component trusts; one with its own
// trusts those, the system's and the administrator's (containerd: those and the system's).
func (h NodeHosts) client(c *http.Client) error {
	tr, ok := c.Transport.(*http.Transport)
	if !ok {
		return nil // already Brewlet's (containerd calls this again for per-host copies)
	}
	var cfg *tls.Config
	if tr.TLSClientConfig != nil {
		cfg = tr.TLSClientConfig.Clone()
	} else {
		cfg = &tls.Config{}
	}
	if cfg.RootCAs == nil {
		cfg.RootCAs = h.Trust.Pool()
	} else {
		cfg.RootCAs = h.Trust.withExtra(cfg.RootCAs)
	}
	if cfg.MinVersion < tls.VersionTLS12 {
		cfg.MinVersion = tls.VersionTLS12
	}
	c.Transport = TransportTLS(h.Timeouts, cfg)
	return nil
}

// hostRewrite applies what go-containerregistry cannot express to requests for one host:
// the scheme the configuration gives (the client picks plain HTTP by itself for loopback
// and private addresses), an API path other than /v2 (override_path), configured headers,
// and the ns query parameter containerd sends to mirrors (pull-through caches need it to
// know the upstream). Requests to other hosts (a token service, a redirect's storage) go
// over TLS only.
type hostRewrite struct {
	base   http.RoundTripper
	other  http.RoundTripper
	scheme string
	host   string
	path   string
	header http.Header
	ns     string
}

func (h *hostRewrite) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != h.host {
		return h.other.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.URL.Scheme = h.scheme
	if rest, ok := strings.CutPrefix(r.URL.Path, "/v2"); ok && h.path != "" && h.path != "/v2" {
		r.URL.Path = strings.TrimSuffix(h.path, "/") + rest
		r.URL.RawPath = ""
	}
	if h.ns != "" && strings.HasPrefix(req.URL.Path, "/v2/") && req.URL.Path != "/v2/" {
		q := r.URL.Query()
		q.Set("ns", h.ns)
		r.URL.RawQuery = q.Encode()
	}
	for k, vs := range h.header {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	return h.base.RoundTrip(r)
}
