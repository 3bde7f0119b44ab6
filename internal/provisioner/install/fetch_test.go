package install

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"

	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/vocab"
)

// blobLayer is a v1.Layer over bytes in memory whose digest, size and diff ID the test
// chooses, as a registry or mirror would claim them.
type blobLayer struct {
	blob   []byte
	digest v1.Hash
	size   int64
	diffID v1.Hash
	read   func() io.ReadCloser // overrides blob
}

func (l blobLayer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l blobLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l blobLayer) Size() (int64, error)     { return l.size, nil }
func (l blobLayer) Compressed() (io.ReadCloser, error) {
	if l.read != nil {
		return l.read(), nil
	}
	return io.NopCloser(bytes.NewReader(l.blob)), nil
}
func (l blobLayer) Uncompressed() (io.ReadCloser, error) {
	return nil, errors.New("the installer must never decompress through the registry client")
}
func (l blobLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

func sha(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}

func gz(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

// honest is a layer whose every claim is true.
func honest(t testing.TB, tarBytes, blob []byte) blobLayer {
	return blobLayer{blob: blob, digest: sha(blob), size: int64(len(blob)), diffID: sha(tarBytes)}
}

// bombTar is a tar holding one file of n zero bytes: it gzips about a thousandfold.
func bombTar(t testing.TB, n int64) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: n}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroReader{}, n); err != nil {
		t.Fatal(err)
	}
	_ = tw.Close()
	return buf.Bytes()
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type fetchEnv struct {
	root string
	ws   *workspace
}

func newFetchEnv(t *testing.T) fetchEnv {
	requireRoot(t)
	root := filepath.Join(t.TempDir(), "layers")
	ws, err := newWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return fetchEnv{root: root, ws: ws}
}

func (e fetchEnv) fetch(l blobLayer, lim Limits) (layerMarker, string, error) {
	dir := filepath.Join(e.root, l.diffID.Hex)
	m, err := fetchLayer(context.Background(), l, l.diffID, dir, e.ws, &budget{limits: lim.withDefaults()})
	return m, dir, err
}

// A blob whose bytes do not hash to the manifest's digest is refused before a single byte
// is decompressed: a gzip bomb expanding 1000 times past the byte cap is reported as the
// digest mismatch it is, not as a limit the extraction ran into.
func TestFetchVerifiesBeforeDecompressing(t *testing.T) {
	e := newFetchEnv(t)
	bomb := gz(t, bombTar(t, 64<<20))
	good := tarOf(t, hdr{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	l := honest(t, good, gz(t, good))
	l.blob = bomb // the mirror's substitute, under the honest digest and diff ID
	l.size = int64(len(bomb))
	_, dir, err := e.fetch(l, Limits{MaxBytes: 64 << 10})
	if vocab.ReasonOf(err) != vocab.ReasonDigestMismatch || !strings.Contains(err.Error(), "without being decompressed") {
		t.Fatalf("substituted bomb: %v; want DigestMismatch before decompression", err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("layer placed")
	}
	// Longer than the manifest says: cut at the declared size and refused the same way.
	l = honest(t, good, gz(t, good))
	l.blob = append(append([]byte{}, l.blob...), make([]byte, 4096)...)
	if _, _, err := e.fetch(l, Limits{}); vocab.ReasonOf(err) != vocab.ReasonDigestMismatch {
		t.Fatalf("blob longer than its size: %v", err)
	}
}

// A bomb with honest digests (a hostile image) is decompressed only up to the byte cap.
func TestFetchByteLimit(t *testing.T) {
	e := newFetchEnv(t)
	tb := bombTar(t, 64<<20)
	l := honest(t, tb, gz(t, tb))
	start := time.Now()
	_, dir, err := e.fetch(l, Limits{MaxBytes: 1 << 20})
	if vocab.ReasonOf(err) != vocab.ReasonLimitExceeded || !strings.Contains(err.Error(), "1048576 bytes") {
		t.Fatalf("bomb with honest digests: %v; want LimitExceeded naming the cap", err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("layer placed")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("refusal took %s: the stream was not cut at the cap", d)
	}
	// A compressed blob larger than the cap is refused before download.
	l.read = func() io.ReadCloser { t.Error("downloaded a blob larger than the cap"); return io.NopCloser(nil) }
	if _, _, err := e.fetch(l, Limits{MaxBytes: int64(len(l.blob)) - 1}); vocab.ReasonOf(err) != vocab.ReasonLimitExceeded {
		t.Fatalf("blob over the cap: %v", err)
	}
	// A stream that ends exactly at the cap is accepted.
	small := bombTar(t, 1<<20)
	if _, _, err := e.fetch(honest(t, small, gz(t, small)), Limits{MaxBytes: int64(len(small))}); err != nil {
		t.Fatalf("tar of exactly the cap: %v", err)
	}
}

// The entry cap holds over the layers of one install: what earlier layers used counts.
func TestFetchEntryLimit(t *testing.T) {
	e := newFetchEnv(t)
	var hs []hdr
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		hs = append(hs, hdr{Name: n, Typeflag: tar.TypeReg, Mode: 0o644})
	}
	tb := tarOf(t, hs...)
	l := honest(t, tb, tb) // an uncompressed layer
	dir := filepath.Join(e.root, l.diffID.Hex)
	b := &budget{limits: Limits{MaxEntries: 6}.withDefaults(), entries: 2}
	_, err := fetchLayer(context.Background(), l, l.diffID, dir, e.ws, b)
	if vocab.ReasonOf(err) != vocab.ReasonLimitExceeded || !strings.Contains(err.Error(), "6 entries") {
		t.Fatalf("5 entries after 2: %v; want LimitExceeded at 6", err)
	}
	b = &budget{limits: Limits{MaxEntries: 6}.withDefaults(), entries: 1}
	if _, err := fetchLayer(context.Background(), l, l.diffID, dir, e.ws, b); err != nil || b.entries != 6 {
		t.Fatalf("5 entries after 1: %v (used %d)", err, b.entries)
	}
}

// Layers extracted at the same time share one budget: two bombs that each fit the byte cap
// but not together are refused, neither is placed (whichever finished first), nothing
// stays in the workspace and nothing stays counted; two that fit
// together are both placed and charged once each. Entries are checked over both too.
func TestFetchLayersShareTheBudget(t *testing.T) {
	e := newFetchEnv(t)
	a, b := bombTar(t, 3<<20), bombTar(t, 3<<20+512)
	la, lb := honest(t, a, gz(t, a)), honest(t, b, gz(t, b))
	fetches := []layerFetch{{index: 0, layer: la, diffID: la.diffID, dir: filepath.Join(e.root, la.diffID.Hex)},
		{index: 1, layer: lb, diffID: lb.diffID, dir: filepath.Join(e.root, lb.diffID.Hex)}}
	wrap := func(f layerFetch, err error) error { return err }

	bud := &budget{limits: Limits{MaxBytes: 5 << 20}.withDefaults()}
	err := fetchLayers(context.Background(), fetches, e.ws, bud, &Result{}, nil, wrap)
	if vocab.ReasonOf(err) != vocab.ReasonLimitExceeded {
		t.Fatalf("two layers over the cap together: %v; want LimitExceeded", err)
	}
	for _, f := range fetches {
		if _, err := os.Stat(f.dir); err == nil {
			t.Errorf("layer %d placed after the refusal", f.index)
		}
	}
	if bud.live != 0 {
		t.Errorf("%d bytes still counted as being extracted", bud.live)
	}
	if ents, err := os.ReadDir(e.ws.dir); err != nil || len(ents) != 1 || ents[0].Name() != ownerFile {
		t.Errorf("the workspace keeps %v after the refusal (%v); want only %s", ents, err, ownerFile)
	}

	bud = &budget{limits: Limits{MaxBytes: int64(len(a) + len(b))}.withDefaults()}
	res := &Result{}
	if err := fetchLayers(context.Background(), fetches, e.ws, bud, res, nil, wrap); err != nil {
		t.Fatalf("two layers within the cap: %v", err)
	}
	if res.LayersFetched != 2 || bud.bytes != int64(len(a)+len(b)) || bud.live != 0 || bud.entries != 2 {
		t.Errorf("fetched %d, charged %d bytes (%d live) and %d entries; want 2, %d, 0, 2", res.LayersFetched, bud.bytes, bud.live, bud.entries, len(a)+len(b))
	}
	for _, f := range fetches {
		if _, err := verifyLayer(f.dir, f.diffID.String()); err != nil {
			t.Errorf("layer %d: %v", f.index, err)
		}
	}

	c, d := bombTar(t, 1<<10), bombTar(t, 2<<10)
	lc, ld := honest(t, c, c), honest(t, d, d)
	fetches = []layerFetch{{index: 0, layer: lc, diffID: lc.diffID, dir: filepath.Join(e.root, lc.diffID.Hex)},
		{index: 1, layer: ld, diffID: ld.diffID, dir: filepath.Join(e.root, ld.diffID.Hex)}}
	bud = &budget{limits: Limits{MaxEntries: 1}.withDefaults()}
	if err := fetchLayers(context.Background(), fetches, e.ws, bud, &Result{}, nil, wrap); vocab.ReasonOf(err) != vocab.ReasonLimitExceeded {
		t.Fatalf("two one-entry layers under a one-entry cap: %v; want LimitExceeded", err)
	}
}

// A fetched layer is placed sealed (marker, counts), in gzip, zstd or plain form; the
// marker check catches a truncated file, a missing file and a missing marker.
func TestFetchSealsAndVerifiesLayers(t *testing.T) {
	e := newFetchEnv(t)
	tb := tarOf(t, hdr{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		hdr{Name: "usr/bin/python3", Typeflag: tar.TypeReg, Mode: 0o755},
		hdr{Name: "usr/lib/x", Typeflag: tar.TypeReg, Mode: 0o644})
	var zs bytes.Buffer
	zw, _ := zstd.NewWriter(&zs)
	_, _ = zw.Write(tb)
	_ = zw.Close()
	for name, blob := range map[string][]byte{"gzip": gz(t, tb), "zstd": zs.Bytes(), "plain": tb} {
		l := honest(t, tb, blob)
		m, dir, err := e.fetch(l, Limits{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.TarEntries != 3 || m.TarBytes != int64(len(tb)) {
			t.Fatalf("%s marker: %+v", name, m)
		}
		if _, err := verifyLayer(dir, l.diffID.String()); err != nil {
			t.Fatalf("%s: fresh layer fails verification: %v", name, err)
		}
		_ = os.RemoveAll(dir)
	}
	l := honest(t, tb, gz(t, tb))
	_, dir, err := e.fetch(l, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verifyLayer(dir, "sha256:"+strings.Repeat("0", 64)); err == nil {
		t.Fatal("a marker for another diff ID passed")
	}
	if err := os.Truncate(filepath.Join(dir, "usr/lib/x"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyLayer(dir, l.diffID.String()); err == nil {
		t.Fatal("a truncated file passed")
	}
	// Fetching again replaces the damaged directory (moved aside for GC).
	if _, _, err := e.fetch(l, Limits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyLayer(dir, l.diffID.String()); err != nil {
		t.Fatalf("replaced layer: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "usr/bin/python3")); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyLayer(dir, l.diffID.String()); err == nil {
		t.Fatal("a missing file passed")
	}
	plain := filepath.Join(e.root, "unmarked")
	if err := os.Mkdir(plain, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyLayer(plain, l.diffID.String()); !errors.Is(err, errNoMarker) {
		t.Fatalf("unmarked directory: %v", err)
	}
}

// Downloads that end early or stall are pull failures (the next source is tried), with
// the stall's own message.
func TestFetchTransportFailures(t *testing.T) {
	e := newFetchEnv(t)
	tb := tarOf(t, hdr{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644})
	l := honest(t, tb, gz(t, tb))
	short := l
	short.blob = l.blob[:len(l.blob)/2]
	if _, _, err := e.fetch(short, Limits{}); vocab.ReasonOf(err) != vocab.ReasonRuntimeImagePullFailed {
		t.Fatalf("short blob: %v", err)
	}
	stalled := l
	stalled.read = func() io.ReadCloser {
		return io.NopCloser(io.MultiReader(bytes.NewReader(l.blob[:10]), errReader{&registry.StallError{URL: "https://mirror.example/v2/x/blobs/sha256:ab", After: 30 * time.Second}}))
	}
	_, _, err := e.fetch(stalled, Limits{})
	if vocab.ReasonOf(err) != vocab.ReasonRuntimeImagePullFailed || !strings.Contains(err.Error(), "stall") || !strings.Contains(err.Error(), "after 10 of") {
		t.Fatalf("stalled blob: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = fetchLayer(ctx, l, l.diffID, filepath.Join(e.root, l.diffID.Hex), e.ws, &budget{limits: DefaultLimits})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled install: %v", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// Workspaces of live installs are never collected, those of killed installs always, and
// ownerless leftovers once old.
func TestCollectStaleWorkspaces(t *testing.T) {
	requireRoot(t)
	root := filepath.Join(t.TempDir(), "layers")
	live, err := newWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.Close() }()
	killed, err := newWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	_ = killed.owner.Close() // what the kernel does when the process dies
	oldTmp := filepath.Join(root, "abc.tmp-0123")
	freshTmp := filepath.Join(root, "def.tmp-4567")
	layer := filepath.Join(root, strings.Repeat("a", 64))
	for _, d := range []string{oldTmp, freshTmp, layer} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-time.Hour)
	_ = os.Chtimes(oldTmp, past, past)
	_ = os.Chtimes(layer, past, past)
	got := collectStale(root, time.Now())
	if len(got) != 2 {
		t.Fatalf("collected %v; want the killed workspace and the old leftover", got)
	}
	for _, d := range []string{live.dir, freshTmp, layer} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s removed: %v", d, err)
		}
	}
	for _, d := range []string{killed.dir, oldTmp} {
		if _, err := os.Stat(d); err == nil {
			t.Fatalf("%s kept", d)
		}
	}
}
