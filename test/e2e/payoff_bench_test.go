//go:build bench

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
)

// TestBenchPayoff measures, on one harness node, what Brewlet is for: N applications with
// distinct code published three ways from the same sources —
//
//	(a) conventional images on one shared base (the CPython runtime image's layers + one
//	    application layer; the best case for conventional images),
//	(b) conventional images on K drifted base generations,
//	(c) Brewlet artifacts (only /app) on the CPython RuntimeImage installed once —
//
// and for each: bytes pulled to the node and disk used once all N run, the time from "image
// not on the node" to "process running" for a new application version, the memory of the
// running applications and their shims, and the CVE rotation to the interpreter's security
// update (python2 of hack/runtimes.sh); then BENCH_CONCURRENT containers created at once,
// runc against brewlet. It prints tables and writes docs/payoff.svg; it asserts no timing.
// BENCH_APPS (20), BENCH_BASES (5), BENCH_RUNS (5 new-version starts) and BENCH_CONCURRENT
// (20) size it; docs/benchmarks.md explains every figure.
func TestBenchPayoff(t *testing.T) {
	p := newPayoff(t)
	ways := []*payWay{p.conventional("a", "conventional, shared base", 1), p.conventional("b", fmt.Sprintf("conventional, %d drifted bases", p.bases), p.bases), p.brewletWay()}
	for _, w := range ways {
		p.measure(w)
	}
	conc := p.concurrent(ways[0], ways[2])
	table := payoffTable(p, ways) + conc
	t.Log(table)
	fmt.Print(table)
	if err := os.WriteFile(filepath.Join(framework.RepoRoot(t), "docs", "payoff.svg"), payoffSVG(p, ways), 0o644); err != nil {
		t.Errorf("write the plot: %v", err)
	}
}

type payoff struct {
	t                   *testing.T
	d                   *dataPath // node, runtime refs, installer, CLI
	apps, bases, runs   int
	py1, py2            v1.Image
	installed           *countingTransport // every byte the installer reads from the registry
	pushed              *countingTransport // every byte the publisher sends (conventional pushes)
	contentDir, snapDir string
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func newPayoff(t *testing.T) *payoff {
	n := framework.StartNode(t)
	p := &payoff{t: t, apps: envInt("BENCH_APPS", 20), bases: envInt("BENCH_BASES", 5), runs: envInt("BENCH_RUNS", 5),
		installed: newCountingTransport(), pushed: newCountingTransport(),
		contentDir: filepath.Join(n.Dir, "root", "io.containerd.content.v1.content"),
		snapDir:    filepath.Join(n.Dir, "root", "io.containerd.snapshotter.v1.overlayfs")}
	d := &dataPath{n: n, host: hoststate.Under(n.HostPrefix), epoch: "5b0d1c2e-3f4a-4b5c-8d6e-7f8091a2b3c4"}
	d.refs = buildRuntimes(t, n.Registry, "python")
	d.inst = &install.Installer{Layout: d.host, Platform: v1.Platform{OS: "linux", Architecture: "amd64"},
		Remote: []remote.Option{remote.WithTransport(p.installed)}}
	d.cli = buildCLI(t)
	p.d = d
	p.py1, p.py2 = p.remoteImage(d.refs["python1"]), p.remoteImage(d.refs["python2"])
	// containerd pulls the pinned sandbox image at the first pod: before any baseline.
	if err := n.Pull(context.Background(), n.PauseImage, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *payoff) remoteImage(ref string) v1.Image {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		p.t.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		p.t.Fatal(err)
	}
	return img
}

// --- applications -----------------------------------------------------------------------

// appFiles is application i's source tree under /app: a small socket web server (src/) and
// four pure-Python "dependencies" (lib/), about 600 KiB of generated, importable code that
// differs between applications (version v changes the application's own code only).
func appFiles(i, v int) map[string]string {
	deps := []struct {
		name string
		size int
	}{{"webkit", 220 << 10}, {"templating", 160 << 10}, {"markup", 110 << 10}, {"signing", 70 << 10}}
	files := map[string]string{}
	var imports []string
	for k, dep := range deps {
		files["lib/"+dep.name+"/__init__.py"] = pyModule(uint64(i), uint64(k), dep.size)
		imports = append(imports, dep.name)
	}
	files["src/views.py"] = pyModule(uint64(i), uint64(100+v), 40<<10)
	files["src/main.py"] = fmt.Sprintf(`import signal, socket, sys
sys.path.insert(0, "/app/lib")
import %s
import views
APP = "app%d version %d"
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(16)
print("listening", APP, flush=True)
while True:
    c, _ = s.accept()
    try:
        c.recv(4096)
        body = ("%%s %%r\n" %% (APP, views.f0(1))).encode()
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %%d\r\n\r\n" %% len(body) + body)
    finally:
        c.close()
`, strings.Join(imports, ", "), i, v)
	return files
}

// pyModule generates size bytes of deterministic, importable Python (functions and classes
// with docstrings), seeded by (app, module).
func pyModule(app, module uint64, size int) string {
	r := rand.New(rand.NewPCG(app, module))
	words := []string{"request", "response", "header", "session", "token", "render", "escape", "encode", "route", "cache", "stream", "field", "value", "context", "signal"}
	w := func() string { return words[r.IntN(len(words))] }
	var b strings.Builder
	fmt.Fprintf(&b, "\"\"\"Generated module %d of application %d.\"\"\"\n\n", module, app)
	for k := 0; b.Len() < size; k++ {
		if k%5 == 4 {
			fmt.Fprintf(&b, "class %s%d:\n    \"\"\"The %s %s of the %s.\"\"\"\n\n    def __init__(self, %s=%d):\n        self.%s = %s\n\n    def %s(self, x):\n        return [self.%s, x, %q]\n\n\n",
				strings.ToUpper(w()[:1])+w(), k, w(), w(), w(), "v", r.IntN(1000), "v", "v", w(), "v", w())
			continue
		}
		fmt.Fprintf(&b, "def f%d(x, y=%d):\n    \"\"\"Return the %s %s for a %s.\"\"\"\n    z = x * %d + y\n    if z > %d:\n        return z - %d\n    return [z, %q, %q]\n\n\n",
			k, r.IntN(1000), w(), w(), w(), r.IntN(97), r.IntN(5000), r.IntN(300), w(), w())
	}
	return b.String()
}

// appLayer is the conventional image's application layer: the same files as the artifact.
func appLayer(t *testing.T, files map[string]string) v1.Layer {
	t.Helper()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	entries := []framework.TarEntry{{Name: "app/", Mode: 0o755, Typeflag: tar.TypeDir}}
	for _, p := range paths {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
				entries = append(entries, framework.TarEntry{Name: "app/" + d + "/", Mode: 0o755, Typeflag: tar.TypeDir})
			}
		}
		entries = append(entries, framework.TarEntry{Name: "app/" + p, Mode: 0o644, Body: []byte(files[p])})
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	raw, err := framework.LayerTar(entries)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// --- the three ways ----------------------------------------------------------------------

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
	rotStop         []time.Duration // per restart: stop + remove of the old container
	rotCreate       []time.Duration // per restart: create + start of the new one
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
		ref, err := framework.Push(img, fmt.Sprintf("%s/bases/%s-python:%d", p.d.n.Registry, key, k))
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
		ref, err := framework.Push(img, fmt.Sprintf("%s/%s/app%d:v%d-g%d", p.d.n.Registry, key, app, version, gen), remote.WithTransport(p.pushed))
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
	w := &payWay{key: "c", title: "Brewlet", handler: vocab.RuntimeClassName, ann: map[string]string{vocab.AnnotationRuntimeImage: pyID}, baseDigests: 1}
	w.publish = func(app, version, _ int) string {
		src := t.TempDir()
		writeTree(t, src, appFiles(app, version))
		out, errOut, code := brewlet(t, d.cli, "push", fmt.Sprintf("%s/c/app%d:v%d", d.n.Registry, app, version),
			"--layer", "dependency="+filepath.Join(src, "lib")+":/app/lib", "--layer", "app="+filepath.Join(src, "src")+":/app/src",
			"--entrypoint", "python", "--arg", "/app/src/main.py", "--env", "PYTHONDONTWRITEBYTECODE=1", "--requires-runtime", pyID)
		if code != 0 {
			t.Fatalf("brewlet push: %s", errOut)
		}
		return lastLine(out)
	}
	install := func(gen int64) int64 {
		before := p.installed.down.Load()
		d.install(t, gen)
		if gen == 1 {
			if err := d.host.OpenFence(); err != nil {
				t.Fatal(err)
			}
		}
		d.authorize(t, false, time.Hour)
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

type payCtr struct {
	podID, cid string
	pod        *runtimeapi.PodSandboxConfig
	attempt    uint32
}

func (p *payoff) measure(w *payWay) {
	t, n, ctx := p.t, p.d.n, context.Background()
	baseContent, baseDisk := p.contentBytes(), p.nodeDisk()
	t.Logf("%s: node before: content %s, disk %s", w.title, mib(baseContent), mib(baseDisk))
	refs := make([]string, p.apps)
	for i := range refs {
		refs[i] = w.publish(i, 0, 1)
	}
	for _, ref := range refs {
		m, err := p.remoteImage(ref).Manifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range m.Layers {
			if !w.baseLayer[l.Digest] {
				w.appBytes += l.Size
			}
		}
	}
	var removable []string
	removable = append(removable, refs...)

	w.pulled = 0
	if w.nodePrep != nil {
		w.pulled += w.nodePrep()
	}
	ctrs := make([]*payCtr, p.apps)
	for i := range ctrs {
		c, d, _ := p.startApp(w, fmt.Sprintf("%s-app%d", w.key, i), refs[i])
		if i == 0 {
			w.firstStart = d
		}
		ctrs[i] = c
	}
	for _, c := range ctrs {
		p.waitLog(c, "listening")
	}
	w.pulled += p.contentBytes() - baseContent
	w.disk = p.nodeDisk() - baseDisk
	w.memPSS, w.memFile, w.memShared = p.appMemory(ctrs)
	w.shimPSS = shimPSS(t, n.Dir, w.handler)
	t.Logf("%s: %d apps running: pulled %s, disk %s", w.title, p.apps, mib(w.pulled), mib(w.disk))

	// A new version of one application, never on the node: pull + create + start.
	for r := 0; r < p.runs; r++ {
		ref := w.publish(r%p.apps, r+1, 1)
		removable = append(removable, ref)
		c, d, ready := p.startApp(w, fmt.Sprintf("%s-new%d", w.key, r), ref)
		w.cold, w.ready = append(w.cold, d), append(w.ready, ready)
		p.removePod(c)
	}

	// The CVE rotation to python2.
	newRefs := refs
	t0 := time.Now()
	pushedBefore := p.pushed.up.Load()
	if w.rebuilds {
		newRefs = make([]string, p.apps)
		for i := range newRefs {
			newRefs[i] = w.publish(i, 0, 2)
			if newRefs[i] != refs[i] {
				w.rotDigests++
			}
			w.rotImages++
		}
		removable = append(removable, newRefs...)
	}
	if w.rebuilds {
		w.rotPublish, w.rotPushed = time.Since(t0), p.pushed.up.Load()-pushedBefore
	}
	contentBefore := p.contentBytes()
	t0 = time.Now()
	if w.nodeRotate != nil {
		w.rotBytes += w.nodeRotate()
		w.rotFetch = time.Since(t0)
	}
	for i, c := range ctrs {
		if w.rebuilds {
			t1 := time.Now()
			if err := n.Pull(ctx, newRefs[i], c.pod); err != nil {
				t.Fatal(err)
			}
			w.rotFetch += time.Since(t1)
		}
		p.restart(w, c, newRefs[i])
	}
	for _, c := range ctrs {
		p.waitLog(c, "listening")
	}
	w.rotWall = time.Since(t0)
	w.rotBytes += p.contentBytes() - contentBefore
	t.Logf("%s: rotation: %d images rebuilt, %s pushed, %s to the node, %s node-side", w.title, w.rotImages, mib(w.rotPushed), mib(w.rotBytes), w.rotWall.Round(time.Millisecond))

	for _, c := range ctrs {
		p.removePod(c)
	}
	for _, ref := range removable {
		if _, err := n.Images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
			t.Logf("remove image %s: %v", ref, err)
		}
	}
	t.Logf("%s: node after removing its pods and images: content %s, disk %s (containerd's GC)", w.title, mib(p.contentBytes()), mib(p.nodeDisk()))
}

func (p *payoff) containerConfig(w *payWay, ref string, attempt uint32) *runtimeapi.ContainerConfig {
	c := framework.ContainerConfig("app", ref)
	c.Metadata.Attempt = attempt
	c.LogPath = fmt.Sprintf("app-%d.log", attempt)
	c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
		RunAsUser: &runtimeapi.Int64Value{Value: 10001}, RunAsGroup: &runtimeapi.Int64Value{Value: 10001}}
	return c
}

// startApp runs a pod, then times pull + create + start of ref in it (and until the
// application logged that it listens).
func (p *payoff) startApp(w *payWay, podName, ref string) (*payCtr, time.Duration, time.Duration) {
	t, n, ctx := p.t, p.d.n, context.Background()
	pod := n.PodConfig(podName, w.ann)
	podID, err := n.RunPod(ctx, pod, w.handler)
	if err != nil {
		t.Fatalf("run pod: %v", err)
	}
	c := &payCtr{podID: podID, pod: pod}
	t0 := time.Now()
	if c.cid, err = n.CreateStart(ctx, podID, pod, p.containerConfig(w, ref, 0)); err != nil {
		t.Fatalf("start %s: %v", ref, err)
	}
	d := time.Since(t0)
	p.waitLog(c, "listening")
	return c, d, time.Since(t0)
}

// restart stops a container and starts ref in its pod (what a rollout or the rotation does
// to a running application).
func (p *payoff) restart(w *payWay, c *payCtr, ref string) {
	t, n, ctx := p.t, p.d.n, context.Background()
	t0 := time.Now()
	if _, err := n.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.cid, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.cid}); err != nil {
		t.Fatal(err)
	}
	c.attempt++
	t1 := time.Now()
	w.rotStop = append(w.rotStop, t1.Sub(t0))
	r, err := n.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: c.podID, Config: p.containerConfig(w, ref, c.attempt), SandboxConfig: c.pod})
	if err != nil {
		t.Fatal(err)
	}
	c.cid = r.ContainerId
	if _, err := n.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.cid}); err != nil {
		t.Fatal(err)
	}
	w.rotCreate = append(w.rotCreate, time.Since(t1))
}

func (p *payoff) removePod(c *payCtr) {
	ctx := context.Background()
	_, _ = p.d.n.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: c.podID})
	if _, err := p.d.n.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: c.podID}); err != nil {
		p.t.Fatal(err)
	}
}

// waitLog waits (60 s at most) for the current container of c to log want.
func (p *payoff) waitLog(c *payCtr, want string) {
	path := filepath.Join(c.pod.LogDirectory, fmt.Sprintf("app-%d.log", c.attempt))
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			st, _ := p.d.n.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: c.cid})
			b, _ := os.ReadFile(path)
			p.t.Fatalf("container %s did not log %q in 60s (status %v): %s", c.cid, want, st.GetStatus().GetState(), b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// appMemory reads smaps_rollup of every application process: PSS, the PSS of its file
// pages (interpreter, libraries, mapped code) and the pages it shares with other processes
// (clean or dirty: pages containerd just unpacked may not be written back yet), in KiB.
// File pages are shared only when the files are the same inodes (the same snapshot or
// layer cache directory).
func (p *payoff) appMemory(ctrs []*payCtr) (pss, file, shared []int) {
	for _, c := range ctrs {
		st, err := p.d.n.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: c.cid, Verbose: true})
		if err != nil {
			p.t.Fatal(err)
		}
		var info struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid == 0 {
			p.t.Fatalf("container %s: no pid in status info (%v)", c.cid, err)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", info.Pid))
		if err != nil {
			p.t.Fatal(err)
		}
		f := map[string]int{}
		for _, l := range strings.Split(string(b), "\n") {
			if kv := strings.Fields(l); len(kv) >= 2 {
				v, _ := strconv.Atoi(kv[1])
				f[strings.TrimSuffix(kv[0], ":")] = v
			}
		}
		pss, file, shared = append(pss, f["Pss"]), append(file, f["Pss_File"]), append(shared, f["Shared_Clean"]+f["Shared_Dirty"])
	}
	return pss, file, shared
}

// contentBytes is the size of every blob in containerd's content store: what was pulled.
func (p *payoff) contentBytes() int64 {
	var sum int64
	_ = filepath.WalkDir(filepath.Join(p.contentDir, "blobs"), func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				sum += fi.Size()
			}
		}
		return nil
	})
	return sum
}

// nodeDisk is the disk used (allocated blocks, each inode once) by containerd's content
// store and overlayfs snapshots, plus Brewlet's runtimes and layer cache.
func (p *payoff) nodeDisk() int64 {
	host := p.d.host
	seen := map[uint64]bool{}
	var sum int64
	for _, dir := range []string{p.contentDir, p.snapDir, host.Runtimes, host.State} {
		_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := e.Info()
			if err != nil {
				return nil
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && !seen[st.Ino] {
				seen[st.Ino] = true
				sum += st.Blocks * 512
			}
			return nil
		})
	}
	return sum
}

// countingTransport counts the bytes read from and sent to a registry.
type countingTransport struct {
	rt       http.RoundTripper
	down, up atomic.Int64
}

func newCountingTransport() *countingTransport {
	return &countingTransport{rt: http.DefaultTransport.(*http.Transport).Clone()}
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body = &countingBody{ReadCloser: req.Body, n: &c.up}
	}
	resp, err := c.rt.RoundTrip(req)
	if err == nil && resp.Body != nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.down}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

// concurrent creates and starts, at once, BENCH_CONCURRENT (20) containers of one already
// pulled image in pods already running: runc with the conventional image of app 0, then
// brewlet with its artifact. It returns a table of p50/p99/max of create+start.
func (p *payoff) concurrent(conv, brew *payWay) string {
	t, n, ctx := p.t, p.d.n, context.Background()
	k := envInt("BENCH_CONCURRENT", 20)
	lat := map[string][]time.Duration{}
	for _, w := range []*payWay{conv, brew} {
		ref := w.publish(0, 0, 1)
		ctrs := make([]*payCtr, k)
		for i := range ctrs {
			pod := n.PodConfig(fmt.Sprintf("%s-conc%d", w.key, i), w.ann)
			podID, err := n.RunPod(ctx, pod, w.handler)
			if err != nil {
				t.Fatalf("run pod: %v", err)
			}
			ctrs[i] = &payCtr{podID: podID, pod: pod}
		}
		if err := n.Pull(ctx, ref, ctrs[0].pod); err != nil {
			t.Fatal(err)
		}
		ds := make([]time.Duration, k)
		errs := make(chan error, k)
		start := make(chan struct{})
		for i, c := range ctrs {
			go func() {
				<-start
				t0 := time.Now()
				r, err := n.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: c.podID, Config: p.containerConfig(w, ref, 0), SandboxConfig: c.pod})
				if err == nil {
					c.cid = r.ContainerId
					_, err = n.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.cid})
				}
				ds[i] = time.Since(t0)
				errs <- err
			}()
		}
		close(start)
		for range ctrs {
			if err := <-errs; err != nil {
				t.Fatalf("%s: concurrent create+start: %v", w.title, err)
			}
		}
		for _, c := range ctrs {
			p.waitLog(c, "listening")
			p.removePod(c)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		lat[w.handler] = ds
	}
	pct := func(ds []time.Duration, q float64) time.Duration { return ds[int(q*float64(len(ds)-1)+0.5)] }
	var s strings.Builder
	fmt.Fprintf(&s, "\n| %d containers created+started at once (pods running, image pulled) | runc, conventional image | brewlet, artifact | ratio |\n|---|---|---|---|\n", k)
	for _, q := range []struct {
		label string
		q     float64
	}{{"p50", 0.5}, {fmt.Sprintf("p99 (of %d: the slowest)", k), 0.99}} {
		r, b := pct(lat["runc"], q.q), pct(lat[vocab.RuntimeClassName], q.q)
		fmt.Fprintf(&s, "| %s | %s | %s | %.2f× |\n", q.label, r.Round(time.Millisecond), b.Round(time.Millisecond), float64(b)/float64(r))
	}
	return s.String()
}

// --- report ------------------------------------------------------------------------------

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func medianOf(ds []time.Duration) time.Duration {
	s := append([]time.Duration{}, ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func sumInts(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func payoffTable(p *payoff, ways []*payWay) string {
	a, b, c := ways[0], ways[1], ways[2]
	var s strings.Builder
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	row := func(metric string, f func(w *payWay) (string, float64)) {
		va, fa := f(a)
		vb, fb := f(b)
		vc, fc := f(c)
		fmt.Fprintf(&s, "| %s | %s | %s | %s | %s | %s |\n", metric, va, vb, vc, ratio(fa, fc), ratio(fb, fc))
	}
	fmt.Fprintf(&s, "\n| metric (%d apps, %d drifted bases) | (a) conventional, shared base | (b) conventional, drifted bases | (c) Brewlet | a/c | b/c |\n|---|---|---|---|---|---|\n", p.apps, p.bases)
	row("base/runtime digests under the apps", func(w *payWay) (string, float64) { return strconv.Itoa(w.baseDigests), float64(w.baseDigests) })
	row("bytes pulled to the node, all apps", func(w *payWay) (string, float64) { return mib(w.pulled), float64(w.pulled) })
	row("… of which the runtime's or bases' layers", func(w *payWay) (string, float64) { return mib(w.basePulled), float64(w.basePulled) })
	row("the apps' own layers (registry blob sizes, sum)", func(w *payWay) (string, float64) { return mib(w.appBytes), float64(w.appBytes) })
	row("node disk, all apps running", func(w *payWay) (string, float64) { return mib(w.disk), float64(w.disk) })
	row("first app on an empty node: pull+create+start", func(w *payWay) (string, float64) { return ms(w.firstStart), float64(w.firstStart) })
	row(fmt.Sprintf("new app version: pull+create+start (median of %d)", p.runs), func(w *payWay) (string, float64) {
		return ms(medianOf(w.cold)), float64(medianOf(w.cold))
	})
	row(fmt.Sprintf("new app version: … until it listens (median of %d)", p.runs), func(w *payWay) (string, float64) {
		return ms(medianOf(w.ready)), float64(medianOf(w.ready))
	})
	row("app processes: PSS, sum (MiB)", func(w *payWay) (string, float64) {
		return fmt.Sprintf("%.1f", float64(sumInts(w.memPSS))/1024), float64(sumInts(w.memPSS))
	})
	row("app process: PSS of file pages (interpreter, libraries), mean (MiB)", func(w *payWay) (string, float64) {
		return fmt.Sprintf("%.2f", float64(sumInts(w.memFile))/1024/float64(len(w.memFile))), float64(sumInts(w.memFile))
	})
	row("app process: pages shared with other processes, mean (MiB)", func(w *payWay) (string, float64) {
		return fmt.Sprintf("%.1f", float64(sumInts(w.memShared))/1024/float64(len(w.memShared))), float64(sumInts(w.memShared))
	})
	row("shims: PSS, sum (MiB)", func(w *payWay) (string, float64) {
		return fmt.Sprintf("%.1f", float64(sumInts(w.shimPSS))/1024), float64(sumInts(w.shimPSS))
	})
	row("CVE rotation: images rebuilt and pushed", func(w *payWay) (string, float64) { return strconv.Itoa(w.rotImages), float64(w.rotImages) })
	row("CVE rotation: workload digests changed", func(w *payWay) (string, float64) { return strconv.Itoa(w.rotDigests), float64(w.rotDigests) })
	row("CVE rotation: rebuild+push time (publisher)", func(w *payWay) (string, float64) { return ms(w.rotPublish), float64(w.rotPublish) })
	row("CVE rotation: bytes pushed (publisher)", func(w *payWay) (string, float64) {
		return fmt.Sprintf("%.1f KiB", float64(w.rotPushed)/1024), float64(w.rotPushed)
	})
	row("CVE rotation: bytes to the node", func(w *payWay) (string, float64) { return mib(w.rotBytes), float64(w.rotBytes) })
	row(fmt.Sprintf("CVE rotation: node wall time (pulls/install + %d restarts)", p.apps), func(w *payWay) (string, float64) {
		return ms(w.rotWall), float64(w.rotWall)
	})
	row("… of which pulls (conventional) or the install (Brewlet)", func(w *payWay) (string, float64) { return ms(w.rotFetch), float64(w.rotFetch) })
	row("… per restart: stop + remove (median)", func(w *payWay) (string, float64) { return ms(medianOf(w.rotStop)), float64(medianOf(w.rotStop)) })
	row("… per restart: create + start on the new runtime (median)", func(w *payWay) (string, float64) {
		return ms(medianOf(w.rotCreate)), float64(medianOf(w.rotCreate))
	})
	return s.String()
}

// payoffSVG draws bytes pulled, node disk, rotation bytes and rotation time per way as
// grouped bars, each group scaled to its own maximum.
func payoffSVG(p *payoff, ways []*payWay) []byte {
	groups := []struct {
		label string
		val   func(w *payWay) float64
		unit  func(v float64) string
	}{
		{"bytes pulled, all apps", func(w *payWay) float64 { return float64(w.pulled) }, func(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }},
		{"node disk, all apps", func(w *payWay) float64 { return float64(w.disk) }, func(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }},
		{"new version: pull to running", func(w *payWay) float64 { return float64(medianOf(w.cold)) }, func(v float64) string { return fmt.Sprintf("%.0f ms", v/1e6) }},
		{"CVE rotation: bytes to node", func(w *payWay) float64 { return float64(w.rotBytes) }, func(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }},
		{"CVE rotation: node wall time", func(w *payWay) float64 { return float64(w.rotWall) }, func(v float64) string { return fmt.Sprintf("%.1f s", v/1e9) }},
		{"CVE rotation: images rebuilt", func(w *payWay) float64 { return float64(w.rotImages) }, func(v float64) string { return fmt.Sprintf("%.0f", v) }},
	}
	colors := []string{"#c0504d", "#f79646", "#4f81bd"}
	const gw, bh, top = 200, 150, 50
	width := len(groups)*gw + 20
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, top+bh+90)
	fmt.Fprintf(&s, `<text x="10" y="20" font-size="14">Brewlet payoff: %d Python apps on one node (TestBenchPayoff, lower is better)</text>`+"\n", p.apps)
	for gi, g := range groups {
		maxV := 0.0
		for _, w := range ways {
			if v := g.val(w); v > maxV {
				maxV = v
			}
		}
		x0 := 20 + gi*gw
		for wi, w := range ways {
			v := g.val(w)
			h := 0.0
			if maxV > 0 {
				h = v / maxV * bh
			}
			x := x0 + 10 + wi*55
			fmt.Fprintf(&s, `<rect x="%d" y="%.1f" width="45" height="%.1f" fill="%s"/>`+"\n", x, top+bh-h, h, colors[wi])
			fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", x+22, top+bh-h-3, g.unit(v))
		}
		fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x0+92, top+bh+16, g.label)
	}
	for wi, w := range ways {
		fmt.Fprintf(&s, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">(%s) %s</text>`+"\n", 20+wi*260, top+bh+40, colors[wi], 36+wi*260, top+bh+50, w.key, w.title)
	}
	s.WriteString("</svg>\n")
	return []byte(s.String())
}
