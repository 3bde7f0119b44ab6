// Package registry is Brewlet's single way of naming and reaching OCI registries: digest
// and tag parsing, the plain-HTTP policy, and credentials from the usual config file.
package registry

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/vocab"
)

// IsLoopback reports whether a registry host (with optional port) is on this machine.
func IsLoopback(host string) bool {
	h := host
	if sh, _, err := net.SplitHostPort(host); err == nil {
		h = sh
	}
	h = strings.Trim(h, "[]")
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// Reference parses an image reference. Plain HTTP is allowed only for a loopback
// registry or when insecure is set explicitly.
func Reference(s string, insecure bool) (name.Reference, error) {
	ref, err := name.ParseReference(s, name.StrictValidation)
	if err != nil {
		return nil, vocab.Errorf(vocab.ReasonInvalidImageReference, "%q is not an image reference (registry/repository:tag or @sha256:...): %v", s, err)
	}
	if insecure || IsLoopback(ref.Context().RegistryStr()) {
		return name.ParseReference(s, name.StrictValidation, name.Insecure)
	}
	return ref, nil
}

// Digest parses a digest-pinned reference and refuses tags, even next to a digest: what
// RuntimeImages name.
func Digest(s string, insecure bool) (name.Digest, error) {
	base, _, hasDigest := strings.Cut(s, "@")
	repo := base[strings.LastIndex(base, "/")+1:]
	if !hasDigest || strings.Contains(repo, ":") {
		return name.Digest{}, vocab.Errorf(vocab.ReasonInvalidImageReference, "%q is not pinned by digest alone; use registry/repository@sha256:<digest>", s)
	}
	ref, err := Reference(s, insecure)
	if err != nil {
		return name.Digest{}, err
	}
	d, ok := ref.(name.Digest)
	if !ok {
		return name.Digest{}, vocab.Errorf(vocab.ReasonInvalidImageReference, "%q is not a digest reference", s)
	}
	return d, nil
}

// Options are the remote options for every registry call: the caller's context,
// credentials from the Docker config file (~/.docker/config.json, $DOCKER_CONFIG), and a
// transport that keeps to the plain-HTTP policy (RequireTLS). An extra option that sets a
// transport of its own replaces that one and must keep to the policy itself.
func Options(ctx context.Context, insecure bool, extra ...remote.Option) []remote.Option {
	return append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(RequireTLS(remote.DefaultTransport, insecure))}, extra...)
}

// ClientOptions are Options for a client that trusts the PEM files caFiles besides the
// system's authorities (the CLI's --ca-file).
func ClientOptions(ctx context.Context, insecure bool, caFiles []string, extra ...remote.Option) ([]remote.Option, error) {
	if len(caFiles) == 0 {
		return Options(ctx, insecure, extra...), nil
	}
	trust, err := LoadTrust(caFiles)
	if err != nil {
		return nil, err
	}
	base, ok := remote.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("the registry client's default transport is a %T, not an *http.Transport", remote.DefaultTransport)
	}
	t := base.Clone()
	t.TLSClientConfig = trust.TLSConfig()
	return Options(ctx, insecure, append([]remote.Option{remote.WithTransport(RequireTLS(t, insecure))}, extra...)...), nil
}

// ParsePlatform parses os/arch[/variant].
func ParsePlatform(s string) (v1.Platform, error) {
	p, err := v1.ParsePlatform(s)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("platform %q: want os/arch[/variant], e.g. linux/amd64", s)
	}
	return *p, nil
}
