package install

import (
	"archive/tar"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/vocab"
)

func TestSourceShare(t *testing.T) {
	const m = time.Minute
	for _, tc := range []struct {
		name        string
		left        time.Duration
		mirrorsLeft int
		want        time.Duration
	}{
		{"one mirror, full deadline", 15 * m, 1, 7*m + 30*time.Second},
		{"first of two mirrors", 15 * m, 2, 3*m + 45*time.Second},
		{"second of two, the first failed fast", 15 * m, 1, 7*m + 30*time.Second},
		{"second of two, the first used its share", 11*m + 15*time.Second, 1, 3*m + 45*time.Second},
		{"mirror with the reserve reached", 7*m + 30*time.Second, 1, 0},
		{"mirror past the reserve", 5 * m, 1, -2*m - 30*time.Second},
		{"origin after mirrors used their shares", 7*m + 30*time.Second, 0, 7*m + 30*time.Second},
		{"origin alone", 15 * m, 0, 15 * m},
	} {
		if got := sourceShare(tc.left, 15*m/originReserve, tc.mirrorsLeft); got != tc.want {
			t.Errorf("%s: sourceShare(%s, mirrors %d) = %s, want %s", tc.name, tc.left, tc.mirrorsLeft, got, tc.want)
		}
	}
}

// trickle serves a registry through a proxy that sends blob bodies one byte at a time, a
// byte just before each stall timeout would fire: a mirror that never stalls and never
// finishes.
func trickle(t *testing.T, origin *url.URL, every time.Duration) *httptest.Server {
	proxy := httputil.NewSingleHostReverseProxy(origin)
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.Request.Method == http.MethodGet && strings.Contains(r.Request.URL.Path, "/blobs/") {
			r.Body = &slowBody{r: r.Body, every: every, done: r.Request.Context().Done()}
		}
		return nil
	}
	proxy.FlushInterval = -1 // every byte goes out as it is read
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv
}

type slowBody struct {
	r     io.ReadCloser
	every time.Duration
	done  <-chan struct{}
}

func (s *slowBody) Read(p []byte) (int, error) {
	select {
	case <-time.After(s.every):
	case <-s.done:
		return 0, io.ErrUnexpectedEOF
	}
	return s.r.Read(p[:min(len(p), 1)])
}
func (s *slowBody) Close() error { return s.r.Close() }

// A mirror trickling bytes just under the stall timeout spends its share of the install
// deadline, not all of it: the origin is reached and the install succeeds within the
// deadline, with the mirror reported as skipped. Without the split the mirror would hold
// the install until the deadline and the install would fail.
func TestInstallMirrorShareOfTheDeadline(t *testing.T) {
	requireRoot(t)
	origin := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(origin.Close)
	ou, _ := url.Parse(origin.URL)
	mirror := trickle(t, ou, 100*time.Millisecond)
	mu, _ := url.Parse(mirror.URL)

	img := amd64Image(t, nil, hdr{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, hdr{Name: "bin/runtime", Typeflag: tar.TypeReg, Mode: 0o755})
	ref, err := name.ParseReference(ou.Host+"/runtimes/tiny:1", name.Insecure)
	must(t, err)
	must(t, remote.Write(ref, img))
	digest, err := img.Digest()
	must(t, err)

	const deadline = 4 * time.Second
	in := &Installer{
		Layout:   hoststate.Under(t.TempDir()),
		Platform: v1.Platform{OS: "linux", Architecture: "amd64"},
		Mirrors:  map[string][]string{ou.Host: {mu.Host}},
		Timeouts: registry.Timeouts{Stall: time.Second},
		Deadline: deadline,
		Log:      t.Logf,
	}
	start := time.Now()
	res, err := in.Install(t.Context(), Request{ID: "tiny", Epoch: "e1", Generation: 1,
		Image: ou.Host + "/runtimes/tiny@" + digest.String(), UID: 10001, GID: 10001})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("install through a trickling mirror failed after %s: %v", took, err)
	}
	if took >= deadline {
		t.Fatalf("install took %s, the whole deadline", took)
	}
	if took < deadline/originReserve-200*time.Millisecond {
		t.Fatalf("install took %s: the mirror cannot have been tried for its share", took)
	}
	if len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0], mu.Host) || !strings.Contains(res.Skipped[0], "its share") {
		t.Fatalf("skipped %q; want the mirror, out of its share of the deadline", res.Skipped)
	}
	if cur, err := in.Layout.Current("tiny"); err != nil || cur.Generation != 1 {
		t.Fatalf("current %+v %v", cur, err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Install workspaces hold owner locks, so the layer cache must be root's alone: a cache
// directory others can write is refused (and not collected in) before any workspace exists.
func TestWorkspaceNeedsPrivateCache(t *testing.T) {
	requireRoot(t)
	root := filepath.Join(t.TempDir(), "layers")
	must(t, os.Mkdir(root, 0o700))
	ws, err := newWorkspace(root)
	must(t, err)
	must(t, ws.Close())
	stale := filepath.Join(root, ".tmp-install-old")
	must(t, os.Mkdir(stale, 0o700))
	must(t, os.WriteFile(filepath.Join(stale, ownerFile), nil, 0o600))
	must(t, os.Chmod(root, 0o777))
	if _, err := newWorkspace(root); vocab.ReasonOf(err) != vocab.ReasonNodeNotReady || !strings.Contains(err.Error(), root) {
		t.Fatalf("world-writable layer cache: %v; want NodeNotReady naming it", err)
	}
	if got := collectStale(root, time.Now()); len(got) != 0 {
		t.Fatalf("collected %v in a layer cache others can write", got)
	}
	if Refused(err) {
		t.Fatal("a host directory problem must not refuse the runtime's digest")
	}
}
