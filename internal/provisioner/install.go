package provisioner

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/golden"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/vocab"
)

// Installer installs runtime generations into a node's layer cache.
type Installer struct {
	Layout   hoststate.Layout
	Platform v1.Platform     // the node's platform
	Remote   []remote.Option // extra registry options (transport)
	Insecure bool            // plain HTTP to non-loopback registries
	// Mirrors lists, per registry host, mirrors tried in order before it. Content is pulled
	// by digest and every blob verified, so a mirror can be slow or absent, never wrong.
	Mirrors map[string][]string
}

// Request names one generation of one runtime ID.
type Request struct {
	ID         string
	Epoch      string
	Generation int64
	Image      string // registry/repo@sha256:...
	UID, GID   int64
}

// Result reports what an install did.
type Result struct {
	Generation    hoststate.Generation
	LayersFetched int
	LayersReused  int
	BytesFetched  int64 // uncompressed bytes extracted
}

// Install pulls the image by digest, verifies every blob, extracts only the layers the
// cache lacks, validates the composed root with the runtime image rules, records the
// generation read-only and flips current to it. A refused generation never becomes current.
func (in *Installer) Install(ctx context.Context, req Request) (*Result, error) {
	ref, err := registry.Digest(req.Image, in.Insecure)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for _, host := range append(append([]string{}, in.Mirrors[ref.Context().RegistryStr()]...), ref.Context().RegistryStr()) {
		cand, err := registry.Digest(host+"/"+ref.Context().RepositoryStr()+"@"+ref.DigestStr(), in.Insecure)
		if err != nil {
			return nil, err
		}
		res, err := in.installFrom(ctx, req, cand)
		if err == nil {
			return res, nil
		}
		switch vocab.ReasonOf(err) {
		case vocab.ReasonRuntimeImagePullFailed, vocab.ReasonDigestMismatch:
			lastErr = err // try the next source
		default:
			return nil, err // the content itself was refused: the same digest everywhere
		}
	}
	return nil, lastErr
}

func (in *Installer) installFrom(ctx context.Context, req Request, ref name.Digest) (*Result, error) {
	opts := registry.Options(ctx, in.Remote...)
	img, platform, err := in.resolve(ref, opts)
	if err != nil {
		return nil, err
	}
	req.Image = ref.String()
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, pullErr(req, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, pullErr(req, err)
	}
	if err := os.MkdirAll(in.Layout.LayerDir(""), 0o700); err != nil {
		return nil, err
	}
	res := &Result{}
	var dirs, diffIDs []string
	for i, l := range layers {
		diffID, err := l.DiffID()
		if err != nil {
			return nil, pullErr(req, err)
		}
		dir := in.Layout.LayerDir(diffID.Hex)
		if _, err := os.Stat(dir); err == nil {
			res.LayersReused++
		} else {
			n, err := fetchLayer(l, diffID, dir)
			if err != nil {
				return nil, fmt.Errorf("runtime %s generation %d layer %d (%s): %w", req.ID, req.Generation, i+1, diffID, err)
			}
			res.LayersFetched++
			res.BytesFetched += n
		}
		dirs, diffIDs = append(dirs, dir), append(diffIDs, diffID.String())
	}
	root, err := golden.IndexDirLayers(dirs)
	if err != nil {
		return nil, err
	}
	v, err := golden.Validate(root, cf.Config.Env, golden.User{UID: req.UID, GID: req.GID})
	if err != nil {
		return nil, err
	}
	res.Generation = hoststate.Generation{
		ID: req.ID, Epoch: req.Epoch, Generation: req.Generation, Digest: ref.DigestStr(),
		Platform: platform.String(), Env: cf.Config.Env, UID: req.UID, GID: req.GID,
		Home: v.Home, HasPath: v.HasPath, Path: v.Path, Layers: diffIDs,
	}
	if err := in.Layout.WriteGeneration(res.Generation); err != nil {
		return nil, err
	}
	if err := in.Layout.SetCurrent(req.ID, hoststate.Ref{Epoch: req.Epoch, Generation: req.Generation}); err != nil {
		return nil, err
	}
	return res, nil
}

// resolve returns the image for the node's platform, from an index or a single manifest.
func (in *Installer) resolve(ref name.Reference, opts []remote.Option) (v1.Image, v1.Platform, error) {
	what := ref.String()
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, v1.Platform{}, vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "fetch %s", what)
	}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, v1.Platform{}, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, v1.Platform{}, err
		}
		m, err := golden.SelectPlatform(im, in.Platform)
		if err != nil {
			return nil, v1.Platform{}, err
		}
		img, err := idx.Image(m.Digest)
		return img, *m.Platform, err
	}
	img, err := desc.Image()
	if err != nil {
		return nil, v1.Platform{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, v1.Platform{}, err
	}
	p := cf.Platform()
	if p == nil || p.OS != in.Platform.OS || p.Architecture != in.Platform.Architecture {
		got := "no platform"
		if p != nil {
			got = p.String()
		}
		return nil, v1.Platform{}, vocab.Errorf(vocab.ReasonPlatformUnavailable, "%s is built for %s but this node needs %s", what, got, in.Platform.String())
	}
	return img, *p, nil
}

// fetchLayer extracts a layer into a temporary directory, checks its diff ID while reading
// (the compressed digest is checked by the registry client), then renames it into place.
func fetchLayer(l v1.Layer, diffID v1.Hash, dir string) (int64, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "open layer")
	}
	defer func() { _ = rc.Close() }()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	tmp := dir + ".tmp-" + hex.EncodeToString(b)
	defer func() { _ = os.RemoveAll(tmp) }()
	h := sha256.New()
	cr := &countingReader{r: io.TeeReader(rc, h)}
	if err := Extract(cr, tmp); err != nil {
		return 0, err
	}
	if _, err := io.Copy(io.Discard, cr); err != nil { // tar padding after the last entry
		return 0, vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "read layer")
	}
	if err := rc.Close(); err != nil {
		return 0, vocab.Wrap(vocab.ReasonDigestMismatch, err, "layer blob failed verification")
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != diffID.Hex {
		return 0, vocab.Errorf(vocab.ReasonDigestMismatch, "layer content hashes to sha256:%s but the image config says %s; the registry or a mirror served altered content", got, diffID)
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, fs.ErrExist) {
		return 0, err
	}
	return cr.n, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func pullErr(req Request, err error) error {
	return vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "runtime %s generation %d from %s", req.ID, req.Generation, req.Image)
}
