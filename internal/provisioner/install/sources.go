package install

import (
	"context"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/vocab"
)

// source is one place an install may pull from: a mirror or the origin (always last).
type source struct {
	host      string
	ref       name.Digest
	transport remote.Option
	rt        http.RoundTripper // the same transport, for lookups that wrap it (signatures)
}

// sources lists where an image is pulled from. The node's containerd registry configuration
// comes first: where it configures the image's registry, its hosts are the sources, in its
// order, exactly as for the node's own images (the chart's mirrors for that registry are then
// not used; docs/install.md, "Registries"). Elsewhere the chart's mirrors, then the registry.
// Every source is checked against the same digest, so a source can at worst fail.
func (in *Installer) sources(ctx context.Context, req Request, ref name.Digest) ([]source, error) {
	origin := ref.Context().RegistryStr()
	repo, digest := ref.Context().RepositoryStr(), ref.DigestStr()
	nh := in.NodeHosts
	nh.Timeouts, nh.Trust = in.Timeouts, in.Trust
	node, configured, err := nh.Sources(ctx, origin)
	if err != nil {
		return nil, vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "runtime %s generation %d: the node's registry configuration for %s cannot be used; fix the hosts.toml it names (containerd itself fails the same way for this registry)", req.ID, req.Generation, origin)
	}
	if configured {
		if len(in.Mirrors[origin]) > 0 {
			in.logf("runtime %s: registry %s is configured by the node's containerd (%s); the agent's own mirrors for it (%s) are not used", req.ID, origin, in.NodeHosts.Dir, strings.Join(in.Mirrors[origin], ", "))
		}
		out := make([]source, 0, len(node))
		for _, s := range node {
			r, err := s.Digest(repo, digest)
			if err != nil {
				return nil, err
			}
			out = append(out, source{host: s.Host, ref: r, transport: remote.WithTransport(s.Transport), rt: s.Transport})
		}
		return out, nil
	}
	in.transportOnce.Do(func() {
		in.rt = registry.RequireTLS(registry.TransportTLS(in.Timeouts, in.Trust.TLSConfig()), in.Insecure)
		in.transport = remote.WithTransport(in.rt)
	})
	hosts := append(append([]string{}, in.Mirrors[origin]...), origin)
	out := make([]source, 0, len(hosts))
	for _, h := range hosts {
		r, err := registry.Digest(h+"/"+repo+"@"+digest, in.Insecure)
		if err != nil {
			return nil, err
		}
		out = append(out, source{host: h, ref: r, transport: in.transport, rt: in.rt})
	}
	return out, nil
}

// credentialSource names the node's credential provider that answers for ref's repository,
// "" when the credentials (if any) come from the Docker config.
func (in *Installer) credentialSource(ref name.Digest) string {
	if in.Keychain == nil {
		return ""
	}
	if p := in.Keychain.ProviderOf(ref.Context().String()); p != "" {
		return "the node's credential provider " + p
	}
	return ""
}
