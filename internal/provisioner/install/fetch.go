package install

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/vocab"
)

// Limits bound what one install may extract, over all layers of the image (reused layers
// count too, so a refusal never depends on the cache). Exceeding one is LimitExceeded.
type Limits struct {
	// MaxBytes caps the uncompressed tar bytes; any one compressed blob larger than it is
	// refused before download (compression never makes a tar much larger).
	MaxBytes int64
	// MaxEntries caps the tar entries: inodes on disk and the validator's memory.
	MaxEntries int64
}

// DefaultLimits fit the largest language runtimes with room to spare (a full JDK or a
// Python with scientific libraries is 1-3 GiB and under 100k entries) and stop a
// decompression bomb long before it fills a node's disk.
var DefaultLimits = Limits{MaxBytes: 8 << 30, MaxEntries: 500_000}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultLimits.MaxEntries
	}
	return l
}

// budget is what is left of the limits during one install.
type budget struct {
	limits Limits
	mu     sync.Mutex
	// bytes and entries are charged: reused layers and finished extractions. live is what
	// the extractions running now have read so far (layers are extracted in parallel).
	bytes, entries, live int64
}

// charge counts a layer already in the cache.
func (b *budget) charge(m layerMarker) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bytes += m.TarBytes
	b.entries += m.TarEntries
	return b.check()
}

// chargeExtracted moves an extracted layer's bytes from live to charged, and counts its
// entries.
func (b *budget) chargeExtracted(m layerMarker) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live -= m.TarBytes
	b.bytes += m.TarBytes
	b.entries += m.TarEntries
	return b.check()
}

func (b *budget) check() error {
	if b.bytes+b.live > b.limits.MaxBytes {
		return b.bytesExceeded()
	}
	if b.entries > b.limits.MaxEntries {
		return vocab.Errorf(vocab.ReasonLimitExceeded, "the runtime image's layers hold more than %d entries together; the node refuses larger images (installer limit)", b.limits.MaxEntries)
	}
	return nil
}

// bytesLeft is how many more uncompressed bytes the install may extract, over all layers.
func (b *budget) bytesLeft() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.limits.MaxBytes - b.bytes - b.live
}

// entriesCharged is the entries of the layers charged so far.
func (b *budget) entriesCharged() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.entries
}

func (b *budget) addLive(n int64) {
	b.mu.Lock()
	b.live += n
	b.mu.Unlock()
}

// budgetReader reads a layer's uncompressed stream within what is left of the install's
// byte budget, which layers extracted at the same time share: together they overshoot it
// by at most one read each before the next read refuses.
type budgetReader struct {
	ctx context.Context
	r   io.Reader
	b   *budget
	n   int64
}

func (c *budgetReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	left := c.b.bytesLeft()
	if left <= 0 {
		// One byte more tells a stream that ends exactly at the cap from one that does not.
		var one [1]byte
		if _, err := io.ReadFull(c.r, one[:]); err == io.EOF {
			return 0, io.EOF
		} else if err != nil {
			return 0, err
		}
		return 0, c.b.bytesExceeded()
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.b.addLive(int64(n))
	return n, err
}

func (b *budget) bytesExceeded() error {
	return vocab.Errorf(vocab.ReasonLimitExceeded, "the runtime image's layers expand to more than %d bytes together; the node refuses larger images (installer limit) — a compressed blob that expands this far is a decompression bomb or an image far larger than a runtime needs", b.limits.MaxBytes)
}

// fetchLayer downloads one layer blob into the workspace while hashing it, compares the
// hash with the manifest's digest, and only then decompresses and extracts it, checking
// the diff ID and the limits as it goes. A blob with the wrong digest is never decompressed,
// so a decompression bomb a mirror substitutes costs its compressed size and nothing more.
// The layer lands in dir (sealed, see seal) or not at all.
func fetchLayer(ctx context.Context, l v1.Layer, diffID v1.Hash, dir string, ws *workspace, b *budget) (layerMarker, error) {
	m, tmp, err := extractLayer(ctx, l, diffID, ws, b)
	if err == nil {
		err = place(tmp, dir, m.DiffID)
	}
	if err == nil {
		err = fsyncDir(filepath.Dir(dir))
	}
	return m, err
}

// extractLayer is fetchLayer up to the sealed layer in the workspace, which it returns:
// an install places its layers only once all of them are extracted and sealed.
func extractLayer(ctx context.Context, l v1.Layer, diffID v1.Hash, ws *workspace, b *budget) (m layerMarker, _ string, err error) {
	m.DiffID = diffID.String()
	tmp := filepath.Join(ws.dir, diffID.Hex)
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	blob, err := download(ctx, l, ws, b.limits)
	if err != nil {
		return m, "", err
	}
	defer func() { _ = blob.Close(); _ = os.Remove(blob.Name()) }() // a workspace holds one blob at a time
	un, err := decompress(blob)
	if err != nil {
		return m, "", err
	}
	defer func() { _ = un.Close() }()
	h := sha256.New()
	cr := &budgetReader{ctx: ctx, r: un, b: b}
	charged := false
	defer func() {
		if !charged {
			b.addLive(-cr.n) // a failed extraction leaves nothing behind to count
		}
	}()
	// Entries are charged when a layer is done: layers extracted at the same time may each
	// reach what was left when they began, and the total is checked at the charge.
	before := b.entriesCharged()
	// Decompression and hashing run ahead of the extractor on a goroutine of their own;
	// it has stopped (Close) before the budget's and the hash's figures are read.
	ra := newReadAhead(io.TeeReader(cr, h))
	defer func() { _ = ra.Close() }()
	entries, err := ExtractLimited(ra, tmp, b.limits.MaxEntries-before)
	if vocab.ReasonOf(err) == vocab.ReasonLimitExceeded && before > 0 {
		err = vocab.Errorf(vocab.ReasonLimitExceeded, "the runtime image's layers hold more than %d entries together; the node refuses larger images (installer limit)", b.limits.MaxEntries)
	}
	if err != nil {
		return m, "", err
	}
	if _, err := io.Copy(io.Discard, ra); err != nil { // tar padding after the last entry
		return m, "", err
	}
	_ = ra.Close()
	if got := hex.EncodeToString(h.Sum(nil)); got != diffID.Hex {
		return m, "", vocab.Errorf(vocab.ReasonDigestMismatch, "layer content hashes to sha256:%s but the image config says %s; the source served altered content", got, diffID)
	}
	m.TarBytes, m.TarEntries = cr.n, entries
	charged = true
	if err := b.chargeExtracted(m); err != nil {
		return m, "", err
	}
	if err := seal(tmp, m); err != nil {
		return m, "", err
	}
	return m, tmp, nil
}

// place renames a sealed layer into the cache. A layer already there (a concurrent install
// of another runtime sharing it) is kept when it verifies. One that does not is moved
// aside, not deleted: a container started on it before (an older Brewlet's layer without a
// marker) still has it as an overlay lower directory, and garbage collection removes the
// aside copy after its grace period like any layer no generation names. The caller fsyncs
// the cache directory after.
func place(tmp, dir, diffID string) error {
	err := os.Rename(tmp, dir)
	if errors.Is(err, fs.ErrExist) {
		if _, verr := verifyLayer(dir, diffID); verr == nil {
			return nil
		}
		if err := os.Rename(dir, dir+".replaced-"+strconv.FormatInt(time.Now().UnixNano(), 36)); err != nil {
			return err
		}
		err = os.Rename(tmp, dir)
	}
	return err
}

// download copies a layer's compressed blob into a workspace file, hashing it on the way,
// and returns the file rewound once its size and digest match the manifest.
func download(ctx context.Context, l v1.Layer, ws *workspace, lim Limits) (*os.File, error) {
	digest, err := l.Digest()
	if err != nil {
		return nil, vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "layer digest")
	}
	size, err := l.Size()
	if err != nil {
		return nil, vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "layer size")
	}
	if size > lim.MaxBytes {
		return nil, vocab.Errorf(vocab.ReasonLimitExceeded, "layer blob %s is %d bytes compressed, more than the %d bytes the node accepts uncompressed (installer limit); nothing was downloaded", digest, size, lim.MaxBytes)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "fetch layer blob %s", digest)
	}
	defer func() { _ = rc.Close() }()
	f, err := os.CreateTemp(ws.dir, "blob-")
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), &capReader{ctx: ctx, r: rc, left: size + 1})
	// The registry client verifies too, at the end of the stream; this check is the one
	// that decides, and it does not depend on how the client reports a mismatch.
	got := hex.EncodeToString(h.Sum(nil))
	switch {
	case n == size && got != digest.Hex, n > size:
		err = vocab.Errorf(vocab.ReasonDigestMismatch, "layer blob %s: the source served %s bytes hashing to sha256:%s; it was discarded without being decompressed", digest, sizeOf(n, size), got)
	case err != nil:
		var se *registry.StallError
		if errors.As(err, &se) {
			err = vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, se, "layer blob %s stopped after %d of %d bytes (the next source, or a later install, tries again)", digest, n, size)
		} else if vocab.ReasonOf(err) == "" {
			err = vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "layer blob %s: read %d of %d bytes", digest, n, size)
		}
	case n != size:
		err = vocab.Errorf(vocab.ReasonRuntimeImagePullFailed, "layer blob %s ended after %d of %d bytes", digest, n, size)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func sizeOf(n, size int64) string {
	if n > size {
		return fmt.Sprintf("more than the manifest's %d", size)
	}
	return fmt.Sprint(n)
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// decompress opens a verified blob by its leading bytes, as containerd does: gzip, zstd or
// a plain tar.
func decompress(f io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(f, 1<<16)
	head, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "open gzip layer")
		}
		return zr, nil
	case bytes.HasPrefix(head, zstdMagic):
		// Bounded window and memory: a frame header may ask for gigabytes.
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(256<<20), zstd.WithDecoderMaxWindow(128<<20))
		if err != nil {
			return nil, vocab.Wrap(vocab.ReasonRuntimeImagePullFailed, err, "open zstd layer")
		}
		return zr.IOReadCloser(), nil
	default:
		return io.NopCloser(br), nil
	}
}

// capReader stops a stream at a byte limit (with the error exceeded returns, or a plain
// overrun when exceeded is nil) and when the install's context ends, and counts what it
// passed on.
type capReader struct {
	ctx      context.Context
	r        io.Reader
	left     int64
	n        int64
	exceeded func() error
}

func (c *capReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	if c.left <= 0 {
		if c.exceeded == nil {
			return 0, io.EOF // the caller compares counts
		}
		// One byte more tells a stream that ends exactly at the cap from one that does not.
		var one [1]byte
		if _, err := io.ReadFull(c.r, one[:]); err == io.EOF {
			return 0, io.EOF
		} else if err != nil {
			return 0, err
		}
		return 0, c.exceeded()
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.left -= int64(n)
	return n, err
}
