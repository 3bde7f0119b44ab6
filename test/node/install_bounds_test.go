package node

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/framework/testimage"
	"brewlet.sh/brewlet/test/kit"
)

// gzipBomb is a gzipped tar holding one file of n zero bytes (about a thousandfold).
func gzipBomb(t *testing.T, n int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: n, Format: tar.FormatPAX}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroes{}, n); err != nil {
		t.Fatal(err)
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

type zeroes struct{}

func (zeroes) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// bombImage is a hostile runtime image with honest digests: one gzip bomb layer.
func bombImage(t *testing.T, blob []byte) v1.Image {
	t.Helper()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(blob)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// logSink collects an Installer's log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func noTmpLeft(t *testing.T, l hoststate.Layout) {
	t.Helper()
	ents, _ := os.ReadDir(l.LayerDir(""))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("install left %s in the layer cache", e.Name())
		}
	}
}

// A mirror that serves a gzip bomb is skipped and the install comes from the origin; the
// mirror's failure is logged, never the runtime's reason. Two mirrors, two kinds of bomb:
// a blob swapped on the mirror's disk under the honest digest (refused by its hash before
// one byte is decompressed) and a hostile image with honest digests that only the mirror
// has (decompressed up to the byte cap, refused with LimitExceeded; the runtime's result is
// then the origin's: it does not have that image).
func TestInstallSkipsHostileMirror(t *testing.T) {
	framework.RequireRoot(t)
	origin := framework.StartRegistry(t)
	mirror := framework.StartRegistry(t)
	img := kit.ShellImage(t)
	ref, err := testimage.Push(img, origin.Addr+"/runtimes/shell:1", framework.RegistryClient(t)...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testimage.Push(img, mirror.Addr+"/runtimes/shell:1", framework.RegistryClient(t)...); err != nil {
		t.Fatal(err)
	}
	// Swap the layer blob on the mirror's disk for a bomb of the same size, so the registry
	// serves it under the honest digest and Content-Length.
	layers, _ := img.Layers()
	dg, _ := layers[0].Digest()
	size, _ := layers[0].Size()
	data := filepath.Join(mirror.Dir, "registry/docker/registry/v2/blobs/sha256", dg.Hex[:2], dg.Hex, "data")
	bomb := gzipBomb(t, size*900)
	if int64(len(bomb)) > size {
		t.Fatalf("bomb of %d bytes does not fit the %d-byte blob", len(bomb), size)
	}
	bomb = append(bomb, make([]byte, size-int64(len(bomb)))...)
	if err := os.WriteFile(data, bomb, 0o644); err != nil {
		t.Fatalf("swap the mirror's blob: %v", err)
	}
	limits := install.Limits{MaxBytes: 64 << 20} // the bomb expands to ~900 MiB
	req := install.Request{ID: "shell", Epoch: "0b7e9a3c-5d1f-4e2a-8b6c-1d2e3f4a5b6c", Generation: 1, Image: ref, UID: 10001, GID: 10001}

	t.Run("a blob with the wrong digest is never decompressed", func(t *testing.T) {
		logs := &logSink{}
		l := hoststate.Under(t.TempDir())
		in := &install.Installer{Layout: l, Trust: framework.RegistryTrust(t), Platform: kit.LinuxAMD64, Limits: limits, Log: logs.Logf,
			Mirrors: map[string][]string{origin.Addr: {mirror.Addr}}}
		res, err := in.Install(context.Background(), req)
		if err != nil {
			t.Fatalf("install with a hostile mirror: %v\nlog:\n%s", err, logs)
		}
		if len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0], mirror.Addr) || !strings.Contains(res.Skipped[0], "DigestMismatch") ||
			!strings.Contains(res.Skipped[0], "without being decompressed") {
			t.Fatalf("skipped sources %q; want the mirror, refused by digest before decompression", res.Skipped)
		}
		if !strings.Contains(logs.String(), "mirror "+mirror.Addr+" skipped") {
			t.Fatalf("the mirror's failure is not logged:\n%s", logs)
		}
		if cur, err := l.Current("shell"); err != nil || cur.Generation != 1 {
			t.Fatalf("current %v %v", cur, err)
		}
		noTmpLeft(t, l)
	})

	t.Run("a hostile image only the mirror has is the mirror's failure, not the runtime's", func(t *testing.T) {
		hostile, err := testimage.Push(bombImage(t, gzipBomb(t, 256<<20)), mirror.Addr+"/runtimes/bomb:1", framework.RegistryClient(t)...)
		if err != nil {
			t.Fatal(err)
		}
		_, digest, _ := strings.Cut(hostile, "@")
		logs := &logSink{}
		l := hoststate.Under(t.TempDir())
		in := &install.Installer{Layout: l, Trust: framework.RegistryTrust(t), Platform: kit.LinuxAMD64, Limits: limits, Log: logs.Logf,
			Mirrors: map[string][]string{origin.Addr: {mirror.Addr}}}
		breq := req
		breq.ID, breq.Image = "bomb", origin.Addr+"/runtimes/bomb@"+digest
		_, err = in.Install(context.Background(), breq)
		if vocab.ReasonOf(err) != vocab.ReasonRuntimeImagePullFailed {
			t.Fatalf("got %v; want the origin's RuntimeImagePullFailed (it lacks the image), not the mirror's refusal", err)
		}
		t.Logf("result: %v\nlog:\n%s", err, logs)
		if !strings.Contains(logs.String(), mirror.Addr) || !strings.Contains(logs.String(), "LimitExceeded") {
			t.Fatalf("the mirror's LimitExceeded is not logged:\n%s", logs)
		}
		noTmpLeft(t, l)
		// The same image from its own registry is refused by the byte cap, well before it
		// fills the disk.
		direct := &install.Installer{Layout: l, Trust: framework.RegistryTrust(t), Platform: kit.LinuxAMD64, Limits: limits, Log: logs.Logf}
		breq.Image = hostile
		if _, err := direct.Install(context.Background(), breq); vocab.ReasonOf(err) != vocab.ReasonLimitExceeded {
			t.Fatalf("bomb from its origin: %v; want LimitExceeded", err)
		}
		noTmpLeft(t, l)
	})
}

// blobStallProxy forwards to a registry but, for GETs of one blob, sends part of the body and
// then either stops (stall) or trickles a byte every tick. It serves TLS from the test
// process's registry authority and reaches the registry with the registry's own credentials,
// as a pull-through mirror holding its own credentials to the origin does.
func blobStallProxy(t *testing.T, upstream *framework.Registry, digest string, trickle time.Duration) string {
	t.Helper()
	a := upstream.Access()
	up := &kit.BasicAuth{User: a.User, Password: a.Password, RT: framework.RegistryTransport(t)}
	u, _ := url.Parse("https://" + upstream.Addr)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = up
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/"+digest) {
			rp.ServeHTTP(w, r)
			return
		}
		get, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, "https://"+upstream.Addr+r.URL.Path, nil)
		resp, err := up.RoundTrip(get)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Header().Set("Docker-Content-Digest", digest)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		for i := len(body) / 2; trickle > 0 && i < len(body); i++ {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(trickle):
			}
			_, _ = w.Write(body[i : i+1])
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}))
	srv.TLS = framework.RegistryServerTLS(t, "127.0.0.1")
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://")
}

// A registry that stalls mid-body fails the install within the stall timeout with a reason
// that says so; one that trickles forever is cut off by the per-install deadline; a
// stalling mirror is skipped for the origin.
func TestInstallRegistryStall(t *testing.T) {
	framework.RequireRoot(t)
	reg := framework.StartRegistry(t)
	img := kit.ShellImage(t)
	ref, err := testimage.Push(img, reg.Addr+"/runtimes/shell:1", framework.RegistryClient(t)...)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	dg, _ := layers[0].Digest()
	repoDigest := strings.SplitN(ref, "/", 2)[1]
	req := install.Request{ID: "shell", Epoch: "0b7e9a3c-5d1f-4e2a-8b6c-1d2e3f4a5b6c", Generation: 1, UID: 10001, GID: 10001}
	timeouts := registry.Timeouts{Stall: 2 * time.Second}

	t.Run("stall mid-body", func(t *testing.T) {
		l := hoststate.Under(t.TempDir())
		in := &install.Installer{Layout: l, Trust: framework.RegistryTrust(t), Platform: kit.LinuxAMD64, Timeouts: timeouts, Deadline: time.Minute, Log: t.Logf}
		req := req
		req.Image = blobStallProxy(t, reg, dg.String(), 0) + "/" + repoDigest
		start := time.Now()
		_, err := in.Install(context.Background(), req)
		took := time.Since(start)
		t.Logf("after %s: %v", took, err)
		if vocab.ReasonOf(err) != vocab.ReasonRuntimeImagePullFailed || !strings.Contains(err.Error(), "read stall timeout") {
			t.Fatalf("stalled registry: %v; want RuntimeImagePullFailed naming the stall", err)
		}
		if took > 20*time.Second {
			t.Fatalf("the stall was detected after %s; want about 2s", took)
		}
		noTmpLeft(t, l)
	})

	t.Run("trickle past the deadline", func(t *testing.T) {
		l := hoststate.Under(t.TempDir())
		in := &install.Installer{Layout: l, Trust: framework.RegistryTrust(t), Platform: kit.LinuxAMD64, Timeouts: timeouts, Deadline: 5 * time.Second, Log: t.Logf}
		req := req
		req.Image = blobStallProxy(t, reg, dg.String(), 200*time.Millisecond) + "/" + repoDigest
		start := time.Now()
		_, err := in.Install(context.Background(), req)
		took := time.Since(start)
		t.Logf("after %s: %v", took, err)
		if vocab.ReasonOf(err) != vocab.ReasonRuntimeImagePullFailed || !strings.Contains(err.Error(), "per-install deadline") || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("trickling registry: %v; want RuntimeImagePullFailed naming the deadline", err)
		}
		if took > 15*time.Second {
			t.Fatalf("the deadline of 5s ended the install after %s", took)
		}
		noTmpLeft(t, l)
	})

	t.Run("a stalling mirror is skipped", func(t *testing.T) {
		l := hoststate.Under(t.TempDir())
		logs := &logSink{}
		mirror := blobStallProxy(t, reg, dg.String(), 0)
		in := &install.Installer{Layout: l, Trust: framework.RegistryTrust(t), Platform: kit.LinuxAMD64, Timeouts: timeouts, Deadline: time.Minute, Log: logs.Logf,
			Mirrors: map[string][]string{reg.Addr: {mirror}}}
		req := req
		req.Image = ref
		res, err := in.Install(context.Background(), req)
		if err != nil {
			t.Fatalf("install past a stalling mirror: %v\nlog:\n%s", err, logs)
		}
		if len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0], "read stall timeout") {
			t.Fatalf("skipped %q", res.Skipped)
		}
	})
}

// A cached layer is re-verified before a new generation reuses it: one damaged after its
// install (a file truncated, as a crash on a filesystem losing unsynced data would leave
// it) is fetched again. The workspace of a killed install is collected by the next
// install; a live one's is not.
func TestInstallReverifiesCacheAndCollectsWorkspaces(t *testing.T) {
	framework.RequireRoot(t)
	reg := framework.StartRegistry(t)
	ref, err := testimage.Push(kit.ShellImage(t), reg.Addr+"/runtimes/shell:1", framework.RegistryClient(t)...)
	if err != nil {
		t.Fatal(err)
	}
	l := hoststate.Under(t.TempDir())
	logs := &logSink{}
	in := &install.Installer{Layout: l, Trust: framework.RegistryTrust(t), Platform: kit.LinuxAMD64, Log: logs.Logf}
	req := install.Request{ID: "shell", Epoch: "0b7e9a3c-5d1f-4e2a-8b6c-1d2e3f4a5b6c", Generation: 1, Image: ref, UID: 10001, GID: 10001}
	r1, err := in.Install(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	layer := l.LayerDir(strings.TrimPrefix(r1.Generation.Layers[0], "sha256:"))

	req.Generation = 2
	if r, err := in.Install(context.Background(), req); err != nil || r.LayersReused != 1 || r.LayersFetched != 0 {
		t.Fatalf("intact cache: %+v %v; want the layer reused", r, err)
	}
	if err := os.Truncate(filepath.Join(layer, "bin/busybox"), 100); err != nil {
		t.Fatal(err)
	}
	req.Generation = 3
	r3, err := in.Install(context.Background(), req)
	if err != nil || r3.LayersFetched != 1 || r3.LayersReused != 0 {
		t.Fatalf("damaged cache: %+v %v; want the layer fetched again", r3, err)
	}
	if fi, err := os.Stat(filepath.Join(layer, "bin/busybox")); err != nil || fi.Size() <= 100 {
		t.Fatalf("busybox not restored: %v %v", fi, err)
	}
	if !strings.Contains(logs.String(), "fails verification") {
		t.Fatalf("the damaged layer is not logged:\n%s", logs)
	}

	// A killed install's workspace: its owner file exists, nobody holds its lock.
	killed := filepath.Join(l.LayerDir(""), ".tmp-install-killed")
	if err := os.MkdirAll(filepath.Join(killed, "half-extracted/usr"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(killed, "owner.lock"), []byte("4242\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A live one: its lock held (as another install of this agent would).
	live := filepath.Join(l.LayerDir(""), ".tmp-install-live")
	if err := os.MkdirAll(live, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(live, "owner.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	req.Generation = 4
	if _, err := in.Install(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(killed); err == nil {
		t.Fatal("the killed install's workspace was not collected")
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("a live install's workspace was removed: %v", err)
	}
}

// Installs of two runtimes sharing a layer run at once (the agent runs one install per ID
// in parallel): each works in its own workspace, neither collects the other's, the layer
// lands once, and both generations verify.
func TestInstallConcurrentSharedLayer(t *testing.T) {
	framework.RequireRoot(t)
	reg := framework.StartRegistry(t)
	ref, err := testimage.Push(kit.ShellImage(t), reg.Addr+"/runtimes/shell:1", framework.RegistryClient(t)...)
	if err != nil {
		t.Fatal(err)
	}
	l := hoststate.Under(t.TempDir())
	in := &install.Installer{Layout: l, Trust: framework.RegistryTrust(t), Platform: kit.LinuxAMD64, Log: t.Logf}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := install.Request{ID: fmt.Sprintf("shell-%d", i), Epoch: "0b7e9a3c-5d1f-4e2a-8b6c-1d2e3f4a5b6c", Generation: 1, Image: ref, UID: 10001, GID: 10001}
			_, errs[i] = in.Install(context.Background(), req)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("install %d: %v", i, err)
		}
	}
	ents, err := os.ReadDir(l.LayerDir(""))
	if err != nil || len(ents) != 1 {
		t.Fatalf("layer cache holds %v (%v); want the one shared layer", ents, err)
	}
}
