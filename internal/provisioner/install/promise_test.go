package install

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// A rotation that drops a tool from PATH is refused before current moves, and the node
// keeps serving the generation before; naming exactly that digest as breaking lets it in;
// a generation that only adds keeps the promise.
func TestInstallKeepsThePromise(t *testing.T) {
	requireRoot(t)
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	push := func(tag string, tools ...string) string { return pushTools(t, u.Host, tag, tools...) }
	g1 := push("1", "python3", "pydoc3")
	g2 := push("2", "python3") // pydoc3 dropped
	g3 := push("3", "python3", "pip3")
	in := &Installer{Layout: hoststate.Under(t.TempDir()), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Log: t.Logf}
	req := func(gen int64, image string) Request {
		return Request{ID: "tools", Epoch: "e1", Generation: gen, Image: image, UID: 10001, GID: 10001}
	}
	current := func() int64 {
		cur, err := in.Layout.Current("tools")
		must(t, err)
		return cur.Generation
	}
	if _, err := in.Install(t.Context(), req(1, g1)); err != nil {
		t.Fatal(err)
	}
	_, err := in.Install(t.Context(), req(2, g2))
	if vocab.ReasonOf(err) != vocab.ReasonRuntimePromiseBroken || !Refused(err) || current() != 1 {
		t.Fatalf("generation 2 dropping pydoc3: %v (refused %v), current %d; want RuntimePromiseBroken and generation 1 kept", err, Refused(err), current())
	}
	for _, want := range []string{"executable /usr/bin: pydoc3 removed", "acceptBreaking: sha256:"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	// Accepting another digest accepts nothing.
	other := req(2, g2)
	other.AcceptBreaking = "sha256:" + string(bytes.Repeat([]byte("0"), 64))
	if _, err := in.Install(t.Context(), other); vocab.ReasonOf(err) != vocab.ReasonRuntimePromiseBroken {
		t.Fatalf("accepting another digest: %v", err)
	}
	accepted := req(2, g2)
	_, digest, _ := bytes.Cut([]byte(g2), []byte("@"))
	accepted.AcceptBreaking = string(digest)
	if _, err := in.Install(t.Context(), accepted); err != nil || current() != 2 {
		t.Fatalf("generation 2 accepted as breaking: %v, current %d", err, current())
	}
	if _, err := in.Install(t.Context(), req(3, g3)); err != nil || current() != 3 {
		t.Fatalf("generation 3 only adds pip3: %v, current %d", err, current())
	}
}

// pushTools pushes a one-layer runtime image holding /usr/bin/<tool> for each tool to
// host's runtimes/tools:<tag> and returns it by digest.
func pushTools(t *testing.T, host, tag string, tools ...string) string {
	t.Helper()
	hs := []hdr{{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755}}
	for _, tool := range tools {
		hs = append(hs, hdr{Name: "usr/bin/" + tool, Typeflag: tar.TypeReg, Mode: 0o755})
	}
	img := amd64Image(t, []string{"PATH=/usr/bin"}, hs...)
	ref, err := name.ParseReference(host+"/runtimes/tools:"+tag, name.Insecure)
	must(t, err)
	must(t, remote.Write(ref, img))
	d, err := img.Digest()
	must(t, err)
	return host + "/runtimes/tools@" + d.String()
}

// amd64Image is a one-layer linux/amd64 image of the entries hs with environment env.
func amd64Image(t *testing.T, env []string, hs ...hdr) v1.Image {
	t.Helper()
	tb := tarOf(t, hs...)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tb)), nil })
	must(t, err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	must(t, err)
	cf, err := img.ConfigFile()
	must(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config.Env = "linux", "amd64", env
	img, err = mutate.ConfigFile(img, cf)
	must(t, err)
	return img
}
