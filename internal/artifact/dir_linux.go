package artifact

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DirEntries reads an unpacked layer directory (a containerd snapshot) into entries without
// following any link. Overlay whiteouts (0/0 character devices) and opaque xattrs are
// recognized.
func DirEntries(root string) ([]Entry, error) {
	var out []Entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := Entry{Path: filepath.ToSlash(rel), Mode: fi.Mode().Perm() | fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid)}
		m := fi.Mode()
		switch {
		case m.IsDir():
			e.Type = TypeDir
		case m.IsRegular():
			e.Type = TypeFile
		case m&fs.ModeSymlink != 0:
			e.Type = TypeSymlink
			if e.Linkname, err = os.Readlink(p); err != nil {
				return err
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
			return err
		}
		for _, n := range names {
			if opaqueXattrs[n] && e.Type == TypeDir {
				e.Opaque = true
				continue
			}
			e.Xattrs = append(e.Xattrs, n)
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

func isWhiteoutDevice(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
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
	return out, nil
}
