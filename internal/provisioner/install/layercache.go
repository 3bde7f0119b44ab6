package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// A cached layer is complete when its directory carries a marker: the extended attribute
// trusted.brewlet.layer on the layer's root, set after every file was extracted and the
// diff ID checked, made durable with the files (syncfs) before the directory is renamed
// into place. The marker lives on the directory itself, not beside it, so it exists exactly
// as long as the directory does and garbage collection needs no change. A trusted.*
// attribute is readable only with CAP_SYS_ADMIN (never by a container's processes),
// overlayfs ignores names outside trusted.overlay.*, and validation never reads the
// layer's root entry.
const layerMarkerXattr = "trusted.brewlet.layer"

// layerMarker records what the extraction produced.
type layerMarker struct {
	DiffID string `json:"diffID"`
	// TarBytes and TarEntries are the uncompressed stream's size and entry count: a reused
	// layer counts against an install's limits as much as a fetched one, so a refusal
	// never depends on what the cache happens to hold.
	TarBytes   int64 `json:"tarBytes"`
	TarEntries int64 `json:"tarEntries"`
	// Files and FileBytes are the tree on disk (entries below the root, regular files'
	// bytes), re-counted before every reuse.
	Files     int64 `json:"files"`
	FileBytes int64 `json:"fileBytes"`
}

// treeStats counts the entries below root and the bytes of its regular files, following
// no link.
func treeStats(root string) (files, bytes int64, err error) {
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		files++
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			bytes += fi.Size()
		}
		return nil
	})
	return files, bytes, err
}

func writeMarker(dir string, m layerMarker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return unix.Lsetxattr(dir, layerMarkerXattr, b, 0)
}

// errNoMarker is a layer directory that was never completed by this installer: left by a
// crash of an older version or put there by something else.
var errNoMarker = errors.New("no completion marker")

// verifyLayer checks a cached layer before a generation reuses it: the marker names the
// diff ID wanted, and the tree still has the entries and file bytes extraction left.
//
// Re-hashing the content is not possible (the diff ID is over the tar stream, which the
// directory no longer is) and would cost as much as a fetch. Counting is cheap (one stat
// per entry) and catches what actually happens to a cache: a removal interrupted half way
// (garbage collection or an operator's rm killed by a reboot), files truncated by a crash
// on a filesystem that lost unsynced data, a directory copied in by hand. Deliberate edits
// by someone with root on the node are outside what any check here could stop.
func verifyLayer(dir, diffID string) (layerMarker, error) {
	var m layerMarker
	buf := make([]byte, 4096)
	n, err := unix.Lgetxattr(dir, layerMarkerXattr, buf)
	if errors.Is(err, unix.ENODATA) {
		return m, errNoMarker
	}
	if err != nil {
		return m, fmt.Errorf("read marker: %w", err)
	}
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		return m, fmt.Errorf("unreadable marker: %w", err)
	}
	if m.DiffID != diffID {
		return m, fmt.Errorf("marker names %s, not %s", m.DiffID, diffID)
	}
	files, bytes, err := treeStats(dir)
	if err != nil {
		return m, fmt.Errorf("walk: %w", err)
	}
	if files != m.Files || bytes != m.FileBytes {
		return m, fmt.Errorf("holds %d entries and %d file bytes, extraction left %d and %d", files, bytes, m.Files, m.FileBytes)
	}
	return m, nil
}

// seal records the marker of a freshly extracted layer and makes the layer durable before
// it can be renamed into place: one syncfs instead of an fsync per file (a runtime layer
// has tens of thousands), which flushes the files, the directories and the marker alike.
// Each layer seals as soon as it is extracted, so the disk works while the install's
// other layers still extract (one syncfs after all of them made installs slower,
// docs/provisioner.md "Durability").
func seal(tmp string, m layerMarker) error {
	files, bytes, err := treeStats(tmp)
	if err != nil {
		return err
	}
	m.Files, m.FileBytes = files, bytes
	if err := writeMarker(tmp, m); err != nil {
		return fmt.Errorf("mark layer complete: %w", err)
	}
	f, err := os.Open(tmp)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sync layer: %w", err)
	}
	return nil
}
