package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"

	"brewlet.sh/brewlet/internal/golden"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/writer"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/registry/credprovider"
	"brewlet.sh/brewlet/internal/signature"
	"brewlet.sh/brewlet/internal/vocab"
)

// Installer installs runtime generations into a node's layer cache.
type Installer struct {
	Layout   hoststate.Layout
	Platform v1.Platform     // the node's platform
	Remote   []remote.Option // extra registry options (a transport set here replaces Timeouts' for pulls; signature lookups keep the source's)
	Insecure bool            // plain HTTP to non-loopback registries
	// Mirrors lists, per registry host, mirrors tried in order before it. Content is pulled
	// by digest and every blob verified, so a mirror can be slow, absent or hostile, and
	// is then skipped: only the origin's answer is the runtime's.
	Mirrors map[string][]string
	// Trust is the authorities registries' certificates are checked against (nil: the
	// system's).
	Trust *registry.Trust
	// NodeHosts is the node's containerd registry configuration (certs.d). Where it
	// configures a registry, its hosts are the sources, in its order, and Mirrors is not
	// used for that registry. Its Trust and Timeouts are the Installer's.
	NodeHosts registry.NodeHosts
	// Keychain gives credentials per repository (nil: the Docker config, a mounted pull
	// Secret). The agent's answers from the node's kubelet credential providers first.
	Keychain *credprovider.Keychain
	// Timeouts bound each registry call (zero fields: registry.DefaultTimeouts).
	Timeouts registry.Timeouts
	// Deadline bounds one whole install, every source included (0: DefaultDeadline). The
	// mirrors together get at most half of it, so the origin is always tried (sourceShare).
	Deadline time.Duration
	// Limits bound what one install extracts (zero fields: DefaultLimits).
	Limits Limits
	// Log reports what is not the install's result: a skipped mirror, a cached layer that
	// failed verification, collected leftovers (log.Printf when nil).
	Log func(format string, args ...any)

	// SignatureKeys are the cluster's signature keys (nil: none): with a Request's own
	// Verification, every digest must be signed as they require before it is installed.
	SignatureKeys *signature.Requirement
	// TrustedRoot is what keyless signing certificates are checked against (nil: none).
	TrustedRoot *signature.TrustedRoot

	// MayWrite, when set, is asked just before the generation's metadata is written and
	// before current flips (the agent's writer lease); an error ends the install there.
	MayWrite func() error

	transportOnce sync.Once
	transport     remote.Option // one connection pool for every install
	rt            http.RoundTripper
}

// maxConfigBytes bounds an image's config blob, which is read into memory whole.
const maxConfigBytes = 4 << 20

// DefaultDeadline lets a multi-GiB runtime come over a slow link; an install that takes
// longer is stuck, and the agent retries it on a later pass.
const DefaultDeadline = 15 * time.Minute

// Request names one generation of one runtime ID.
type Request struct {
	ID         string
	Epoch      string
	Generation int64
	Image      string // registry/repo@sha256:...
	UID, GID   int64
	// Verification is the RuntimeImage's spec.verification (VerificationOf; "": none). The
	// cluster's keys are the Installer's SignatureKeys.
	Verification string
	// AcceptBreaking is the digest the RuntimeImage accepts as breaking the promise of the
	// generation the node serves (keepsPromise; "": none).
	AcceptBreaking string
	// Rollback: the generation serves an earlier generation's digest again after the one
	// the node may serve failed workloads; it is not compared with that one's promise.
	Rollback bool
}

// Result reports what an install did.
type Result struct {
	Generation    hoststate.Generation
	LayersFetched int
	LayersReused  int
	BytesFetched  int64 // uncompressed bytes extracted
	// Skipped lists the mirrors that failed before the source that served the install.
	Skipped []string
	// Reinstated is the generation of this node whose layers the install reused for the
	// same digest without pulling the image (0: it was pulled).
	Reinstated int64
	// Phases says where the install's time went, for the agent's log: "resolve=12ms
	// extract=380ms place=1ms validate=35ms publish=8ms" (manifest and config; fetching,
	// verifying, extracting and syncing the missing layers; renaming them into the cache;
	// validating the composed root; metadata, syncs, current). extract is absent when every
	// layer was cached.
	Phases string
}

func (in *Installer) logf(format string, args ...any) {
	if in.Log != nil {
		in.Log(format, args...)
		return
	}
	log.Printf(format, args...)
}

// Install pulls the image by digest, verifies every blob, extracts only the layers the
// cache lacks, validates the composed root with the runtime image rules, records the
// generation read-only and flips current to it. A refused generation never becomes current.
//
// Sources are the registry's mirrors, in order, then the registry itself (the origin).
// Whatever a mirror does wrong — unreachable, a wrong digest, content over the limits,
// content refused by validation — is logged and the next source tried; the install's
// result is the origin's alone. The whole install, all sources, runs within Deadline; the
// mirrors share at most half of it (sourceShare), so the origin is always tried.
func (in *Installer) Install(ctx context.Context, req Request) (*Result, error) {
	ref, err := registry.Digest(req.Image, in.Insecure)
	if err != nil {
		return nil, err
	}
	deadline := in.Deadline
	if deadline <= 0 {
		deadline = DefaultDeadline
	}
	dctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	root := in.Layout.LayerDir("")
	for _, name := range collectStale(root, time.Now()) {
		in.logf("removed %s left in the layer cache by an interrupted install", name)
	}
	if from, ok := in.installedAs(req, ref.DigestStr()); ok {
		res, err := in.reinstate(dctx, req, ref, from)
		if err == nil || ctx.Err() != nil || Refused(err) || errors.Is(err, writer.ErrNotWriter) {
			return res, err
		}
		in.logf("runtime %s generation %d: generation %d of this node holds %s but cannot serve it (%v); pulling it", req.ID, req.Generation, from.Generation, ref.DigestStr(), err)
	}
	sources, err := in.sources(ctx, req, ref)
	if err != nil {
		return nil, err
	}
	if err := in.checkSignature(dctx, req, sources); err != nil {
		return nil, err
	}
	reserve := deadline / originReserve
	end, _ := dctx.Deadline()
	var skipped []string
	for i, src := range sources {
		host, cand := src.host, src.ref
		mirror := i < len(sources)-1
		sctx, scancel := dctx, context.CancelFunc(func() {})
		var share time.Duration // a mirror's; the origin runs until the install's deadline
		if mirror {
			share = sourceShare(time.Until(end), reserve, len(sources)-1-i)
			if share <= 0 {
				// Earlier mirrors used their shares: what is left is the origin's.
				in.logf("runtime %s generation %d: mirror %s skipped, trying the next source: no time left before the origin's reserved share of the install deadline", req.ID, req.Generation, host)
				skipped = append(skipped, host+": no time left before the origin's share of the install deadline")
				continue
			}
			sctx, scancel = context.WithTimeout(dctx, share)
		}
		res, err := in.installFrom(sctx, req, cand, src.transport)
		err = registry.NodeHints.Classify(err, host, in.credentialSource(cand))
		timedOut := sctx.Err() != nil
		scancel()
		if err == nil {
			res.Skipped = skipped
			return res, nil
		}
		if ctx.Err() == nil && dctx.Err() != nil {
			// A pull failure, not LimitExceeded: the time an install takes says nothing about
			// the content (LimitExceeded of an image is final for its digest), so it is retried.
			return nil, vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "runtime %s generation %d: the install did not finish within %s (the per-install deadline) while pulling from %s; it is tried again later", req.ID, req.Generation, deadline, host)
		}
		if !mirror || ctx.Err() != nil {
			return nil, err
		}
		if timedOut {
			err = vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "mirror %s did not finish within its share (%s) of the install deadline", host, share.Round(time.Millisecond))
		}
		in.logf("runtime %s generation %d: mirror %s skipped, trying the next source: %v", req.ID, req.Generation, host, err)
		skipped = append(skipped, host+": "+err.Error())
	}
	panic("unreachable: the origin is always the last source")
}

// originReserve: the origin always keeps 1/originReserve of the install deadline. A mirror
// that trickles bytes just fast enough to never stall must not spend the whole deadline,
// and the origin's answer is the one that counts, so it is always tried with real time.
const originReserve = 2

// sourceShare is how long the next mirror may take: what is left of the install's time
// beyond the origin's reserve, split evenly among the mirrors not yet tried (mirrorsLeft,
// this one included). A mirror that fails fast leaves its share to the next ones; the
// origin gets whatever is left, at least the reserve. Zero or less: no time for the mirror.
func sourceShare(left, reserve time.Duration, mirrorsLeft int) time.Duration {
	if mirrorsLeft <= 0 {
		return left
	}
	return (left - reserve) / time.Duration(mirrorsLeft)
}

func (in *Installer) installFrom(ctx context.Context, req Request, ref name.Digest, transport remote.Option) (*Result, error) {
	extra := []remote.Option{transport}
	if in.Keychain != nil {
		extra = append(extra, remote.WithAuthFromKeychain(in.Keychain))
	}
	opts := registry.Options(ctx, in.Insecure, append(extra, in.Remote...)...)
	var ph phases
	ph.start()
	img, platform, err := in.resolve(ref, opts)
	if err != nil {
		return nil, err
	}
	req.Image = ref.String()
	// The registry client reads a config blob whole, as large as the manifest says: bound it
	// before it is fetched (real configs are kilobytes).
	if m, err := img.Manifest(); err != nil {
		return nil, pullErr(req, err)
	} else if m.Config.Size > maxConfigBytes {
		return nil, vocab.Errorf(vocab.ReasonLimitExceeded, "runtime %s generation %d: %s declares a config blob of %d bytes, more than the %d the node reads; an image config is kilobytes", req.ID, req.Generation, req.Image, m.Config.Size, maxConfigBytes)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, pullErr(req, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, pullErr(req, err)
	}
	ph.mark("resolve")
	ws, err := newWorkspace(in.Layout.LayerDir(""))
	if err != nil {
		return nil, err
	}
	defer func() { _ = ws.Close() }()
	res := &Result{}
	b := &budget{limits: in.Limits.withDefaults()}
	var diffIDs []string
	var fetches []layerFetch
	var again []layerMarker // layers the image lists more than once: charged each time
	seen := map[string]bool{}
	for i, l := range layers {
		diffID, err := l.DiffID()
		if err != nil {
			return nil, pullErr(req, err)
		}
		dir := in.Layout.LayerDir(diffID.Hex)
		diffIDs = append(diffIDs, diffID.String())
		if seen[diffID.Hex] {
			again = append(again, layerMarker{DiffID: diffID.String()})
			continue
		}
		seen[diffID.Hex] = true
		if m, err := verifyLayer(dir, diffID.String()); err == nil {
			if err := b.charge(m); err != nil {
				return nil, fmt.Errorf("runtime %s generation %d layer %d (%s): %w", req.ID, req.Generation, i+1, diffID, err)
			}
			res.LayersReused++
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			in.logf("cached layer %s fails verification (%v); fetching it again", diffID, err)
		}
		fetches = append(fetches, layerFetch{index: i, layer: l, diffID: diffID, dir: dir})
	}
	if err := fetchLayers(ctx, fetches, ws, b, res, &ph, func(f layerFetch, err error) error {
		return fmt.Errorf("runtime %s generation %d layer %d (%s) from %s: %w", req.ID, req.Generation, f.index+1, f.diffID, ref.RegistryStr(), err)
	}); err != nil {
		return nil, err
	}
	for _, a := range again {
		m, err := verifyLayer(in.Layout.LayerDir(strings.TrimPrefix(a.DiffID, "sha256:")), a.DiffID)
		if err == nil {
			err = b.charge(m)
		}
		if err != nil {
			return nil, fmt.Errorf("runtime %s generation %d layer %s (listed again): %w", req.ID, req.Generation, a.DiffID, err)
		}
		res.LayersReused++
	}
	ph.mark("place")
	signed, err := in.signedUnder(req)
	if err != nil {
		return nil, err
	}
	return in.publish(ctx, req, hoststate.Generation{Digest: ref.DigestStr(), Platform: platform.String(),
		Env: cf.Config.Env, Layers: diffIDs, SignedUnder: signed}, res, &ph)
}

// publish validates the composed root of g's layers (all in the cache) as generation req,
// holds it to the promise of the generation the node serves, records it and moves current
// to it. g carries what the image says (digest, platform, environment, layers); the rest
// is filled here.
func (in *Installer) publish(ctx context.Context, req Request, g hoststate.Generation, res *Result, ph *phases) (*Result, error) {
	dirs := make([]string, len(g.Layers))
	for i, l := range g.Layers {
		dirs[i] = in.Layout.LayerDir(strings.TrimPrefix(l, "sha256:"))
	}
	root, err := golden.IndexDirLayersContext(ctx, dirs)
	if err != nil {
		return nil, err
	}
	v, err := golden.Validate(root, g.Env, golden.User{UID: req.UID, GID: req.GID})
	if err != nil {
		return nil, err
	}
	if err := in.keepsPromise(ctx, req, g.Digest, root, g.Env); err != nil {
		return nil, err
	}
	ph.mark("validate")
	if err := in.mayWrite(ctx); err != nil {
		return nil, err
	}
	g.ID, g.Epoch, g.Generation, g.UID, g.GID = req.ID, req.Epoch, req.Generation, req.UID, req.GID
	g.Home, g.HasPath, g.Path = v.Home, v.HasPath, v.Path
	res.Generation = g
	if err := in.Layout.WriteGeneration(res.Generation); err != nil {
		return nil, err
	}
	// The metadata file is synced by its writer; its directory entries, up to the runtime's
	// directory, must be too before current can name them.
	gen := in.Layout.GenerationDir(req.ID, req.Epoch, req.Generation)
	for _, d := range []string{gen, filepath.Dir(gen), in.Layout.RuntimeDir(req.ID), in.Layout.Runtimes} {
		if err := fsyncDir(d); err != nil {
			return nil, fmt.Errorf("sync %s: %w", d, err)
		}
	}
	if err := in.mayWrite(ctx); err != nil {
		return nil, err
	}
	if err := in.Layout.SetCurrent(req.ID, hoststate.Ref{Epoch: req.Epoch, Generation: req.Generation}); err != nil {
		return nil, err
	}
	if err := fsyncDir(in.Layout.RuntimeDir(req.ID)); err != nil {
		return nil, fmt.Errorf("sync current of %s: %w", req.ID, err)
	}
	ph.mark("publish")
	res.Phases = ph.String()
	return res, nil
}

// maxParallelLayers is how many layers an install fetches and extracts at once (containerd
// downloads three at a time by default). Decompression is one core's work per stream, so
// a runtime whose base and interpreter layers extract side by side installs in about the
// time of the larger one.
const maxParallelLayers = 3

type layerFetch struct {
	index  int
	layer  v1.Layer
	diffID v1.Hash
	dir    string
}

// fetchLayers fetches and extracts the missing layers, maxParallelLayers at a time, and
// places them in the layer cache once every one of them is extracted and verified: an
// image refused on any layer (a bomb, a digest mismatch, the limits over all layers) leaves
// nothing in the cache, whichever layer happened to finish first. The first failure
// cancels the others; it is the one returned, wrapped.
func fetchLayers(ctx context.Context, fetches []layerFetch, ws *workspace, b *budget, res *Result, ph *phases, wrap func(layerFetch, error) error) error {
	if len(fetches) == 0 {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxParallelLayers)
	done := make([]struct {
		m   layerMarker
		tmp string
	}, len(fetches))
	for i, f := range fetches {
		g.Go(func() error {
			m, tmp, err := extractLayer(gctx, f.layer, f.diffID, ws, b)
			if err != nil {
				return wrap(f, err) // extractLayer removed what it extracted
			}
			done[i].m, done[i].tmp = m, tmp
			return nil
		})
	}
	err := g.Wait()
	ph.mark("extract")
	if err != nil {
		for _, d := range done {
			if d.tmp != "" {
				_ = os.RemoveAll(d.tmp)
			}
		}
		return err
	}
	for i, f := range fetches {
		if err := place(done[i].tmp, f.dir, done[i].m.DiffID); err != nil {
			return wrap(f, err)
		}
		res.LayersFetched++
		res.BytesFetched += done[i].m.TarBytes
	}
	return fsyncDir(filepath.Dir(fetches[0].dir))
}

// phases times an install's parts.
type phases struct {
	last  time.Time
	parts []string
}

func (p *phases) start() { p.last = time.Now() }

// mark ends the phase called name; a nil p records nothing.
func (p *phases) mark(name string) {
	if p == nil {
		return
	}
	now := time.Now()
	p.parts = append(p.parts, name+"="+now.Sub(p.last).Round(100*time.Microsecond).String())
	p.last = now
}

func (p *phases) String() string { return strings.Join(p.parts, " ") }

// mayWrite reports whether the install may still change the host: its context is live
// (the agent cancels it when the writer lease is lost) and MayWrite agrees.
func (in *Installer) mayWrite(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if in.MayWrite != nil {
		return in.MayWrite()
	}
	return nil
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

func pullErr(req Request, err error) error {
	return vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "runtime %s generation %d from %s", req.ID, req.Generation, req.Image)
}
