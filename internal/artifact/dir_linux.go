package artifact

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// dirBatch is how many directory entries are read at once: a directory of millions of
// names is counted against the budget as it is read, never listed whole first.
const dirBatch = 4096

// DirEntries reads an unpacked layer directory (a containerd snapshot; named where in
// refusals) into entries, sorted by path, without following any link, counting them
// against the layer set's budget. The root itself is the entry ".". Overlay whiteouts (0/0
// character devices) and opaque markers are recognized exactly as the kernel does.
func DirEntries(root string, b *Budget, where string) ([]Entry, error) {
	e, err := dirEntry(root, ".", b.lim.NodeLabel)
	if err != nil {
		return nil, err
	}
	if err := b.Take(where, e); err != nil {
		return nil, err
	}
	out := []Entry{e}
	for pending := []string{"."}; len(pending) > 0; {
		dir := pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		err := readDir(filepath.Join(root, dir), func(name string) error {
			p := path.Join(dir, name)
			e, err := dirEntry(root, p, b.lim.NodeLabel)
			if err != nil {
				return err
			}
			if err := b.Take(where, e); err != nil {
				return err
			}
			out = append(out, e)
			if e.Type == TypeDir {
				pending = append(pending, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// readDir calls fn for each name of a directory, in batches.
func readDir(dir string, fn func(string) error) error {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	for {
		names, err := f.Readdirnames(dirBatch)
		for _, n := range names {
			if err := fn(n); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// dirEntry describes one path of an unpacked layer. A security.selinux attribute holding
// nodeLabel is the node's own labelling and is left out of the entry's attributes.
func dirEntry(root, rel, nodeLabel string) (Entry, error) {
	p := filepath.Join(root, filepath.FromSlash(rel))
	fi, err := os.Lstat(p)
	if err != nil {
		return Entry{}, err
	}
	m := fi.Mode()
	e := Entry{Path: rel, Mode: m.Perm() | m&(fs.ModeSetuid|fs.ModeSetgid)}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		// Runtime rules judge owners (PATH directories); application rules ignore them.
		e.UID, e.GID = int(st.Uid), int(st.Gid)
	}
	switch {
	case m.IsDir():
		e.Type = TypeDir
	case m.IsRegular():
		e.Type = TypeFile
	case m&fs.ModeSymlink != 0:
		e.Type = TypeSymlink
		if e.Linkname, err = os.Readlink(p); err != nil {
			return Entry{}, err
		}
	case m&fs.ModeCharDevice != 0 && isWhiteoutDevice(fi):
		e.Type = TypeWhiteout
	case m&fs.ModeDevice != 0:
		e.Type = TypeDevice
	case m&fs.ModeNamedPipe != 0:
		e.Type = TypeFIFO
	case m&fs.ModeSocket != 0:
		e.Type = TypeSocket
	}
	names, err := listXattrs(p)
	if err != nil {
		return Entry{}, err
	}
	for _, n := range names {
		if n == SELinuxXattr {
			v, err := labelOf(p)
			if err != nil {
				return Entry{}, err
			}
			if nodeLabel != "" && v == nodeLabel {
				continue
			}
			e.Xattrs = append(e.Xattrs, n)
			e.XattrValues = map[string]string{n: v}
			continue
		}
		if n == OpaqueXattr && e.Type == TypeDir {
			v, err := opaqueValueOf(p)
			if err != nil {
				return Entry{}, err
			}
			if isOpaqueMarker(n, v, true) {
				e.Opaque = true
				continue
			}
		}
		e.Xattrs = append(e.Xattrs, n)
	}
	return e, nil
}

// isWhiteoutDevice is the kernel's IS_WHITEOUT: a character device numbered 0/0.
func isWhiteoutDevice(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

// opaqueValueOf reads the opaque marker's value, enough of it to tell "y" from anything
// else ("" stands for a value too long to be "y").
func opaqueValueOf(p string) (string, error) {
	buf := make([]byte, 2)
	n, err := unix.Lgetxattr(p, OpaqueXattr, buf)
	switch {
	case errors.Is(err, unix.ERANGE):
		return "", nil
	case err != nil:
		return "", err
	}
	return string(buf[:n]), nil
}

func listXattrs(p string) ([]string, error) {
	sz, err := unix.Llistxattr(p, nil)
	if err != nil || sz == 0 {
		if err == unix.ENOTSUP {
			return nil, nil
		}
		return nil, err
	}
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range strings.Split(string(buf[:sz]), "\x00") {
		if n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}
