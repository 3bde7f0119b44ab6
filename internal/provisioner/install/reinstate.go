package install

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"brewlet.sh/brewlet/internal/hoststate"
)

// A digest this node installed before under the same epoch — the generation a rollback
// serves again, or a digest a platform team set back by hand — is never fetched again: the
// new generation is composed from the earlier one's layers in the cache, checked as an
// install checks cached layers, validated, and published. No registry is contacted unless
// the signature requirements changed since the earlier install.

// installedAs finds the newest other generation of req's epoch installed with digest.
func (in *Installer) installedAs(req Request, digest string) (hoststate.Generation, bool) {
	refs, err := in.Layout.Generations(req.ID)
	if err != nil {
		return hoststate.Generation{}, false
	}
	var best hoststate.Generation
	found := false
	for _, r := range refs {
		if r.Epoch != req.Epoch || r.Generation == req.Generation || (found && r.Generation < best.Generation) {
			continue
		}
		g, err := in.Layout.ReadGeneration(req.ID, r)
		// The same digest of an index resolves per platform: only a generation installed for
		// this node's platform has the layers this install would choose.
		if err != nil || g.Digest != digest || len(g.Layers) == 0 || g.Platform != in.Platform.String() {
			continue
		}
		best, found = g, true
	}
	return best, found
}

// reinstate installs req (digest ref) from the layers of from, an installed generation of
// the same digest. Layers that fail their check, or a signature lookup that fails, end it
// with an error; the caller then pulls the image as usual.
func (in *Installer) reinstate(ctx context.Context, req Request, ref name.Digest, from hoststate.Generation) (*Result, error) {
	var ph phases
	ph.start()
	signed, err := in.signedUnder(req)
	if err != nil {
		return nil, err
	}
	if signed != from.SignedUnder {
		// Required now, or under other requirements than when it was installed: the
		// signature is looked up again (a few kilobytes; no layer).
		sources, err := in.sources(ctx, req, ref)
		if err != nil {
			return nil, err
		}
		if err := in.checkSignature(ctx, req, sources); err != nil {
			return nil, err
		}
	}
	ph.mark("resolve")
	res := &Result{Reinstated: from.Generation}
	b := &budget{limits: in.Limits.withDefaults()}
	for _, l := range from.Layers {
		m, err := verifyLayer(in.Layout.LayerDir(strings.TrimPrefix(l, "sha256:")), l)
		if err == nil {
			err = b.charge(m)
		}
		if err != nil {
			return nil, fmt.Errorf("runtime %s generation %d: layer %s of generation %d: %w", req.ID, req.Generation, l, from.Generation, err)
		}
		res.LayersReused++
	}
	ph.mark("place")
	return in.publish(ctx, req, hoststate.Generation{Digest: from.Digest, Platform: from.Platform, Env: from.Env,
		Layers: from.Layers, SignedUnder: signed}, res, &ph)
}

// signedUnder is the fingerprint of the signature requirements req's digest is held to on
// this node ("": none).
func (in *Installer) signedUnder(req Request) (string, error) {
	reqs, err := in.requirements(req)
	if err != nil || len(reqs) == 0 {
		return "", err
	}
	return reqs.Fingerprint(), nil
}
