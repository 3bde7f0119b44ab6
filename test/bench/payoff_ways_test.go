//go:build bench

package bench

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/framework/testimage"
	"brewlet.sh/brewlet/test/kit"
)

// payWay is one way of publishing and running the applications, and what it measured.
type payWay struct {
	key, title string
	handler    string
	ann        map[string]string
	publish    func(app, version, gen int) string // push app's version on runtime generation gen
	nodePrep   func() int64                       // before the first pull (Brewlet: install)
	nodeRotate func() int64                       // the rotation's node-side step (Brewlet: install gen 2)
	rebuilds   bool                               // the rotation rebuilds and re-pushes every app

	baseDigests     int              // distinct runtime/base digests under the N apps
	pulled          int64            // bytes to the node for all N (content store + installer)
	baseLayer       map[v1.Hash]bool // the bases' layers (conventional)
	appBytes        int64            // the apps' own layers, as the registry stores them
	basePulled      int64            // of which the runtime's or bases' layers
	disk            int64            // node disk for all N (content + snapshots + layer cache)
	firstStart      time.Duration    // app 0 on a node without any of its images
	cold, ready     []time.Duration
	memPSS, memFile []int // KiB per app process: PSS, PSS of file pages
	memShared       []int // KiB shared with other processes, per app process
	shimPSS         []int
	rotPublish      time.Duration   // rebuild + push of every image (publisher side)
	rotPushed       int64           // bytes sent to the registry by the rotation
	rotBytes        int64           // bytes to the node
	rotWall         time.Duration   // node side: pulls/install + N restarts
	rotFetch        time.Duration   // of which pulls (conventional) or the install (Brewlet)
	rotStopOnly     []time.Duration // per restart: CRI StopContainer of the old container
	rotRemove       []time.Duration // per restart: CRI RemoveContainer of it
	rotCreate       []time.Duration // per restart: create + start of the new one
	rotOverlap      int             // restarts created while the one before still started
	setIDs          []string        // the restarts on a settled node (after the rotation)
	setCreate       []time.Duration // their create + start
	rotImages       int             // images rebuilt and pushed
	rotDigests      int             // workload image digests changed
}

// conventional is way (a) (bases=1) or (b): images = base layers + one application layer,
// app i on base i mod bases; base 0 is python1 itself, base k>0 python1 with its
// interpreter-packages layer re-shipped with a one-file difference (as a rebuilt base
// re-ships its changed layers). The rotation rebuilds every app on python2.
func (p *payoff) conventional(key, title string, bases int) *payWay {
	t := p.t
	var baseImgs []v1.Image
	for k := 0; k < bases; k++ {
		img := p.py1
		if k > 0 {
			img = p.driftedBase(k)
		}
		ref, err := testimage.Push(img, fmt.Sprintf("%s/bases/%s-python:%d", p.d.N.Registry, key, k), framework.RegistryClient(t)...)
		if err != nil {
			t.Fatal(err)
		}
		baseImgs = append(baseImgs, p.remoteImage(ref)) // pulled from the registry, as a build would
	}
	w := &payWay{key: key, title: title, handler: "runc", rebuilds: true, baseDigests: bases}
	seen := map[v1.Hash]bool{}
	w.baseLayer = seen
	for _, img := range baseImgs {
		ls, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			d, _ := l.Digest()
			size, _ := l.Size()
			if !seen[d] {
				seen[d] = true
				w.basePulled += size
			}
		}
	}
	w.publish = func(app, version, gen int) string {
		base := baseImgs[app%bases]
		if version > 0 {
			base = baseImgs[bases-1] // a new version is built on the newest base
		}
		if gen == 2 {
			base = p.py2
		}
		img, err := mutate.Append(base, mutate.Addendum{Layer: appLayer(t, appFiles(app, version)), MediaType: types.OCILayer})
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.Config.Entrypoint, cf.Config.Cmd = []string{"python", "/app/src/main.py"}, nil
		cf.Config.Env = append(cf.Config.Env, "PYTHONDONTWRITEBYTECODE=1")
		cf.Config.User, cf.Config.WorkingDir = "10001:10001", "/app"
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			t.Fatal(err)
		}
		ref, err := testimage.Push(img, fmt.Sprintf("%s/%s/app%d:v%d-g%d", p.d.N.Registry, key, app, version, gen), append(framework.RegistryClient(t), remote.WithTransport(p.pushed))...)
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	return w
}

// driftedBase is python1 with its second layer (the interpreter's packages) rewritten with
// one more file naming base generation k: a distinct digest of the same size.
func (p *payoff) driftedBase(k int) v1.Image {
	t := p.t
	layers, err := p.py1.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	var buf bytes.Buffer
	tr, tw := tar.NewReader(rc), tar.NewWriter(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	body := []byte(fmt.Sprintf("base generation %d\n", k))
	if err := tw.WriteHeader(&tar.Header{Name: "usr/share/doc/brewlet-bench-base", Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write(body)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	l2, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := p.py1.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs, cf.History = nil, nil
	img, err := mutate.ConfigFile(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), cf)
	if err != nil {
		t.Fatal(err)
	}
	ls := append([]v1.Layer{layers[0], l2}, layers[2:]...)
	if img, err = mutate.AppendLayers(img, ls...); err != nil {
		t.Fatal(err)
	}
	return img
}

// brewletWay is way (c): `brewlet push` of /app only; the runtime is installed once by the
// provisioner's Installer (the node agent's code) and rotated by installing generation 2.
func (p *payoff) brewletWay() *payWay {
	t, d := p.t, p.d
	w := &payWay{key: "c", title: "Brewlet", handler: vocab.RuntimeClassName, ann: map[string]string{vocab.AnnotationRuntimeImage: kit.PyID}, baseDigests: 1}
	w.publish = func(app, version, _ int) string {
		src := t.TempDir()
		kit.WriteTree(t, src, appFiles(app, version))
		out, errOut, code := kit.Brewlet(t, d.CLI, "push", fmt.Sprintf("%s/c/app%d:v%d", d.N.Registry, app, version),
			"--layer", "dependency="+filepath.Join(src, "lib")+":/app/lib", "--layer", "app="+filepath.Join(src, "src")+":/app/src",
			"--entrypoint", "python", "--arg", "/app/src/main.py", "--env", "PYTHONDONTWRITEBYTECODE=1", "--requires-runtime", kit.PyID)
		if code != 0 {
			t.Fatalf("brewlet push: %s", errOut)
		}
		return kit.LastLine(out)
	}
	install := func(gen int64) int64 {
		before := p.installed.down.Load()
		res := d.Install(t, gen)
		t.Logf("brewlet install of generation %d: %s", gen, res.Phases)
		if gen == 1 {
			if err := d.Host.OpenFence(); err != nil {
				t.Fatal(err)
			}
		}
		d.Authorize(t, false, time.Hour)
		return p.installed.down.Load() - before
	}
	w.nodePrep = func() int64 {
		b := install(1)
		w.basePulled = b
		return b
	}
	w.nodeRotate = func() int64 { return install(2) }
	return w
}

// --- measurement -------------------------------------------------------------------------

// remoteImage reads an image the bench pushed to the node's registry.
func (p *payoff) remoteImage(ref string) v1.Image {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		p.t.Fatal(err)
	}
	img, err := remote.Image(r, framework.RegistryClient(p.t)...)
	if err != nil {
		p.t.Fatal(err)
	}
	return img
}
