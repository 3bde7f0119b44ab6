package install

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/vocab"
)

const (
	opaqueXattr    = "trusted.overlay.opaque"
	paxXattrPrefix = "SCHILY.xattr."
)

// Overlay attributes (artifact.IsOverlayXattr) are refused rather than stripped: a runtime
// image built by ordinary tools never carries one (they come from copying an overlay's
// upper directory), so one present means a tool bug or an attempt to hide lower entries
// (opaque with an odd value, redirect, whiteout, metacopy) from validation; silently
// dropping it would install content that differs from the image.

// Extract writes one layer tar stream into dst (created empty, must not exist) in
// overlayfs's on-disk format: whiteouts become 0/0 character devices and opaque markers the
// trusted.overlay.opaque xattr, so the directory can serve as an overlay lower layer as is.
//
// The stream is untrusted. No path leaves dst or names it: absolute and '..' paths,
// whiteouts whose name is empty, "." or ".." (".wh..", ".wh..."), whiteout names used as
// directories, non-directories naming the root and hard links to the root or outside it are
// refused (artifact.ReadTarHeaders, then artifact.InLayer on every name here), every
// parent is checked to be a real directory (never a symlink, so a link in the layer cannot
// redirect a later entry onto the host), and links are created, never followed. Device
// nodes are skipped: a container's /dev comes from the runtime (runc), not from images.
//
// Overlay's own attributes are the extractor's alone: an entry carrying any
// trusted.overlay.* or user.overlay.* extended attribute is refused (see artifact.IsOverlayXattr).
func Extract(r io.Reader, dst string) error {
	_, err := ExtractLimited(r, dst, -1)
	return err
}

// ExtractLimited is Extract refusing a stream of more than maxEntries tar entries
// (negative: no limit) with LimitExceeded, and returning how many entries it read. The
// entry cap bounds the work and inodes of one layer; the caller bounds the bytes it feeds.
func ExtractLimited(r io.Reader, dst string, maxEntries int64) (int64, error) {
	return extract(r, dst, maxEntries, true)
}

// extract is ExtractLimited; queued lets small files be created in the background
// (extractwriters.go), and tests compare it with extraction strictly in order.
func extract(r io.Reader, dst string, maxEntries int64, queued bool) (int64, error) {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return 0, err
	}
	x := &extractor{root: dst, maxEntries: maxEntries}
	if queued {
		x.w = newWriters(x)
	}
	vs, err := artifact.ReadTarHeaders(r, x.entry)
	if x.w != nil {
		if werr := x.w.close(); err == nil {
			err = werr
		}
	}
	if err != nil {
		return x.entries, err
	}
	if len(vs) > 0 {
		return x.entries, refuse(vs[0].Path, vs[0].Rule)
	}
	return x.entries, nil
}

type extractor struct {
	root       string
	maxEntries int64
	entries    int64
	w          *writers // small files are created by these; nil: all in place
}

func refuse(p, why string) error {
	return vocab.Errorf(vocab.ReasonLayerPathViolation, "runtime layer entry %q: %s; the layer was not installed", p, why)
}

// parent returns the host path of p's parent directory inside root, creating missing
// directories and refusing any component that is not a real directory.
func (x *extractor) parent(p string) (string, error) {
	dir := x.root
	parts := strings.Split(path.Dir(p), "/")
	for _, c := range parts {
		if c == "." || c == "" {
			continue
		}
		next := filepath.Join(dir, c)
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(next, 0o755); err != nil {
				return "", err
			}
		case err != nil:
			return "", err
		case fi.Mode()&fs.ModeSymlink != 0:
			return "", refuse(p, "a parent directory is a symlink in the same layer")
		case !fi.IsDir():
			return "", refuse(p, "a parent is not a directory")
		}
		dir = next
	}
	return dir, nil
}

func (x *extractor) entry(e artifact.Entry, h *tar.Header, body io.Reader) error {
	x.entries++
	if x.maxEntries >= 0 && x.entries > x.maxEntries {
		return vocab.Errorf(vocab.ReasonLimitExceeded, "runtime layer has more than %d entries (at %q); the node refuses larger layers — split or slim the image, or raise the installer's entry limit", x.maxEntries, e.Path)
	}
	// Checked on the raw header: the tar reader turns an opaque attribute into e.Opaque,
	// and a "y" from the archive must not pass as one the extractor set.
	for k := range h.PAXRecords {
		if name, ok := strings.CutPrefix(k, paxXattrPrefix); ok && artifact.IsOverlayXattr(name) {
			return refuse(e.Path, fmt.Sprintf("carries the overlay attribute %s; overlayfs reads these as instructions (opaque, redirect, metacopy), so only the extractor sets them, from .wh. markers", name))
		}
	}
	// The tar reader has judged every name (artifact.judgeName); this is the extractor's own
	// last word before a host path is built from one, so no slip there can reach outside dst.
	if e.Path == "." {
		// The root is the extractor's own directory (the reader lets only a directory entry
		// name it; an opaque marker there is ignored by overlayfs, as by the validators).
		return nil
	}
	if !artifact.InLayer(e.Path) {
		return refuse(e.Path, "names a path outside the layer")
	}
	if x.w != nil {
		if err := x.w.settle(e); err != nil {
			return err
		}
	}
	dir, err := x.parent(e.Path)
	if err != nil {
		return err
	}
	name := filepath.Join(dir, path.Base(e.Path))
	switch e.Type {
	case artifact.TypeWhiteout:
		if err := removeExisting(name); err != nil {
			return err
		}
		return unix.Mknod(name, unix.S_IFCHR, 0)
	case artifact.TypeDir:
		if e.Opaque && path.Base(h.Name) == ".wh..wh..opq" {
			// The marker names its directory, which the same layer usually lists too.
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
			return unix.Lsetxattr(name, opaqueXattr, []byte("y"), 0)
		}
		if fi, err := os.Lstat(name); err != nil || !fi.IsDir() {
			if err := removeExisting(name); err != nil {
				return err
			}
			if err := os.Mkdir(name, 0o755); err != nil {
				return err
			}
		}
	case artifact.TypeFile:
		if err := removeExisting(name); err != nil {
			return err
		}
		if x.w != nil && h.Size >= 0 && h.Size <= maxQueuedFile {
			data := make([]byte, h.Size)
			if _, err := io.ReadFull(body, data); err != nil {
				return err
			}
			x.w.queue(name, data, e) // the writer applies the attributes
			return nil
		}
		if err := createFile(name, body); err != nil {
			return err
		}
	case artifact.TypeSymlink:
		if err := removeExisting(name); err != nil {
			return err
		}
		if err := os.Symlink(e.Linkname, name); err != nil {
			return err
		}
	case artifact.TypeHardlink:
		target := e.Linkname
		if !artifact.InLayer(target) {
			return refuse(e.Path, "hard link target outside the layer")
		}
		tdir, err := x.parent(target)
		if err != nil {
			return err
		}
		if err := removeExisting(name); err != nil {
			return err
		}
		// The new name shares the target's inode and attributes: setting them again could
		// follow a symlink the link points at.
		return os.Link(filepath.Join(tdir, path.Base(target)), name)
	case artifact.TypeFIFO:
		if err := removeExisting(name); err != nil {
			return err
		}
		if err := unix.Mkfifo(name, 0o600); err != nil {
			return err
		}
	case artifact.TypeDevice:
		return nil
	default:
		return refuse(e.Path, "unsupported entry type")
	}
	return x.attributes(name, e)
}

// attributes applies owner, mode and extended attributes without following links.
func (x *extractor) attributes(name string, e artifact.Entry) error {
	if err := os.Lchown(name, e.UID, e.GID); err != nil {
		return err
	}
	if e.Type != artifact.TypeSymlink {
		mode := e.Mode.Perm() | e.Mode&(fs.ModeSetuid|fs.ModeSetgid)
		if err := os.Chmod(name, mode); err != nil {
			return err
		}
	}
	for k, v := range e.XattrValues {
		if k == artifact.SELinuxXattr {
			// A label is the node's business, never the image's (containerd drops it from
			// copies too); the container sees the runtime in its own context anyway, because
			// the composed root is mounted with containerd's context= option.
			continue
		}
		if err := unix.Lsetxattr(name, k, []byte(v), 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("set %s on %s: %w", k, e.Path, err)
		}
	}
	return nil
}

// removeExisting clears the way for an entry that replaces an earlier one of the layer.
func removeExisting(name string) error {
	fi, err := os.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return os.RemoveAll(name)
	}
	return os.Remove(name)
}
