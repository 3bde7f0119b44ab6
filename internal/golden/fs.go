package golden

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"brewlet.sh/brewlet/internal/artifact"
)

// FS is the composed root as a read-only file system, for reading what the runtime holds
// (internal/promise) without mounting it: each path is served by the layer that provides it
// in the view, whiteouts and opaque directories applied as overlayfs would. Links are
// reported as links (fs.ReadLinkFS) and never followed here. Only a root indexed from
// extracted layers (IndexDirLayersContext) has one; others return nil.
func (r *Root) FS() fs.FS {
	if r.dirs == nil {
		return nil
	}
	return viewFS{r}
}

type viewFS struct{ r *Root }

func (v viewFS) lookup(op, name string) (artifact.Entry, bool, error) {
	if !fs.ValidPath(name) {
		return artifact.Entry{}, false, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." || v.r.view.Implied(name) {
		return artifact.Entry{Path: name, Type: artifact.TypeDir, Mode: 0o755}, true, nil
	}
	e, ok := v.r.view.Lookup(name)
	if !ok || e.Type == artifact.TypeWhiteout || e.Type == artifact.TypeDevice {
		return artifact.Entry{}, false, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return e, false, nil
}

// disk is where an entry's bytes are in the layer cache.
func (v viewFS) disk(name string) string {
	i, _ := v.r.view.LayerOf(name)
	return filepath.Join(v.r.dirs[i], filepath.FromSlash(name))
}

func (v viewFS) Lstat(name string) (fs.FileInfo, error) {
	e, implied, err := v.lookup("lstat", name)
	if err != nil {
		return nil, err
	}
	fi := entryInfo{e: e}
	if !implied && e.Type == artifact.TypeFile {
		st, err := os.Lstat(v.disk(name))
		if err != nil {
			return nil, err
		}
		fi.size = st.Size()
	}
	return fi, nil
}

// Stat is Lstat: links are resolved by the reader, inside the root, never here.
func (v viewFS) Stat(name string) (fs.FileInfo, error) { return v.Lstat(name) }

func (v viewFS) ReadLink(name string) (string, error) {
	e, _, err := v.lookup("readlink", name)
	if err != nil {
		return "", err
	}
	if e.Type != artifact.TypeSymlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return e.Linkname, nil
}

func (v viewFS) ReadDir(name string) ([]fs.DirEntry, error) {
	fi, err := v.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
	}
	var out []fs.DirEntry
	for _, c := range v.r.view.Children(name) {
		p := c
		if name != "." {
			p = name + "/" + c
		}
		if ci, err := v.Lstat(p); err == nil {
			out = append(out, fs.FileInfoToDirEntry(ci))
		}
	}
	return out, nil
}

func (v viewFS) Open(name string) (fs.File, error) {
	fi, err := v.Lstat(name)
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		entries, err := v.ReadDir(name)
		if err != nil {
			return nil, err
		}
		return &dirFile{fi: fi, entries: entries}, nil
	case fi.Mode().IsRegular():
		// The layer cache is the installer's own tree: a regular entry of the view is a
		// regular file there (O_NOFOLLOW keeps a swapped link from being followed).
		f, err := os.OpenFile(v.disk(name), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil, err
		}
		return f, nil
	default:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
}

type entryInfo struct {
	e    artifact.Entry
	size int64
}

func (i entryInfo) Name() string {
	if i.e.Path == "." {
		return "."
	}
	return filepath.Base(i.e.Path)
}
func (i entryInfo) Size() int64 { return i.size }
func (i entryInfo) Mode() fs.FileMode {
	m := i.e.Mode.Perm()
	switch i.e.Type {
	case artifact.TypeDir:
		m |= fs.ModeDir
	case artifact.TypeSymlink:
		m |= fs.ModeSymlink
	case artifact.TypeFile, artifact.TypeHardlink:
	default:
		m |= fs.ModeIrregular
	}
	return m
}
func (i entryInfo) ModTime() time.Time { return time.Time{} }
func (i entryInfo) IsDir() bool        { return i.e.Type == artifact.TypeDir }
func (i entryInfo) Sys() any           { return nil }

type dirFile struct {
	fi      fs.FileInfo
	entries []fs.DirEntry
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.fi, nil }
func (d *dirFile) Read([]byte) (int, error)   { return 0, io.EOF }
func (d *dirFile) Close() error               { return nil }
func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	if n <= 0 {
		out := d.entries
		d.entries = nil
		return out, nil
	}
	if len(d.entries) == 0 {
		return nil, io.EOF
	}
	k := min(n, len(d.entries))
	out := d.entries[:k]
	d.entries = d.entries[k:]
	return out, nil
}
