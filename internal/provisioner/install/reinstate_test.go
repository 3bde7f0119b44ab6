package install

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// A rollback generation serves a digest the node installed before: it is composed from
// that generation's layers without one request to the registry, and it is not held to the
// promise of the generation it replaces (which added a tool the rollback drops again). The
// same digest as an ordinary rotation is held to it. A damaged cached layer is pulled again.
func TestRollbackMovesNoByte(t *testing.T) {
	requireRoot(t)
	var requests atomic.Int64
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	good := pushTools(t, u.Host, "1", "python3")
	bad := pushTools(t, u.Host, "2", "python3", "pip3")
	in := &Installer{Layout: hoststate.Under(t.TempDir()), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Log: t.Logf}
	req := func(gen int64, image string, rollback bool) Request {
		return Request{ID: "tools", Epoch: "e1", Generation: gen, Image: image, UID: 10001, GID: 10001, Rollback: rollback}
	}
	for i, image := range []string{good, bad} { // in order: generation 1, then 2
		if _, err := in.Install(t.Context(), req(int64(i+1), image, false)); err != nil {
			t.Fatal(err)
		}
	}
	requests.Store(0)
	if _, err := in.Install(t.Context(), req(3, good, false)); vocab.ReasonOf(err) != vocab.ReasonRuntimePromiseBroken {
		t.Fatalf("generation 1's digest again as an ordinary rotation after generation 2 added pip3: %v; want RuntimePromiseBroken", err)
	}
	res, err := in.Install(t.Context(), req(3, good, true))
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := in.Layout.Current("tools")
	if res.Reinstated != 1 || res.LayersFetched != 0 || res.BytesFetched != 0 || requests.Load() != 0 || cur.Generation != 3 {
		t.Fatalf("rollback: %+v, %d registry requests, current %v; want generation 1's layers reused, no request, current 3", res, requests.Load(), cur)
	}
	g3, err := in.Layout.ReadGeneration("tools", cur)
	if err != nil || g3.Digest != res.Generation.Digest || !strings.HasSuffix(good, g3.Digest) || g3.Generation != 3 {
		t.Fatalf("generation 3's record: %+v %v", g3, err)
	}

	// A cached layer whose marker is gone is not trusted: the image is pulled again.
	layer := strings.TrimPrefix(g3.Layers[0], "sha256:")
	must(t, os.Chmod(in.Layout.LayerDir(layer), 0o755))
	must(t, removeMarker(in.Layout.LayerDir(layer)))
	requests.Store(0)
	res, err = in.Install(t.Context(), req(4, good, true))
	if err != nil || res.Reinstated != 0 || res.LayersFetched != 1 || requests.Load() == 0 {
		t.Fatalf("rollback over a damaged layer: %+v %v, %d requests; want it pulled", res, err, requests.Load())
	}
}

func removeMarker(dir string) error { return unix.Lremovexattr(dir, layerMarkerXattr) }

// A generation installed for another platform is never reused: the same index digest
// resolves to other layers there.
func TestReinstateOnlyForThisPlatform(t *testing.T) {
	requireRoot(t)
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	image := pushTools(t, u.Host, "1", "python3")
	l := hoststate.Under(t.TempDir())
	in := &Installer{Layout: l, Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Log: t.Logf}
	req := Request{ID: "tools", Epoch: "e1", Generation: 1, Image: image, UID: 10001, GID: 10001}
	if _, err := in.Install(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	arm := &Installer{Layout: l, Platform: v1.Platform{OS: "linux", Architecture: "arm64"}, Log: t.Logf}
	req.Generation = 2
	if res, err := arm.Install(t.Context(), req); err == nil || res != nil {
		t.Fatalf("an arm64 node reused an amd64 generation: %+v", res)
	}
}
