package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"brewlet.sh/brewlet/internal/vocab"
)

// Determinism policy: entries sorted by path, owner 0:0 without names, timestamps at the
// epoch, permission bits kept as found, gzip at a fixed level. Same inputs, same digest.
// FixedTime and CompressionLevel are shared with internal/artifact/ociimage, which
// assembles the image.
var (
	FixedTime        = time.Unix(0, 0).UTC()
	CompressionLevel = gzip.DefaultCompression
)

// LayerSpec is one --layer ROLE=SRC:DEST of `brewlet push`.
type LayerSpec struct {
	Role string // app or dependency
	Src  string // file or directory on disk
	Dest string // absolute destination under /app
}

// ParseLayerSpec parses ROLE=SRC:DEST.
func ParseLayerSpec(s string) (LayerSpec, error) {
	role, rest, ok := strings.Cut(s, "=")
	src, dest, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || src == "" || dest == "" {
		return LayerSpec{}, fmt.Errorf("--layer %q: want ROLE=SRC:DEST, e.g. app=./src:/app/src", s)
	}
	if role != vocab.LayerApp && role != vocab.LayerDependency {
		return LayerSpec{}, fmt.Errorf("--layer %q: role must be %q or %q", s, vocab.LayerApp, vocab.LayerDependency)
	}
	d := path.Clean(dest)
	if !path.IsAbs(dest) || !UnderApp(strings.TrimPrefix(d, "/")) {
		return LayerSpec{}, vocab.Errorf(vocab.ReasonLayerPathViolation, "--layer %q: destination %q must be /app or below it", s, dest)
	}
	return LayerSpec{Role: role, Src: src, Dest: d}, nil
}

// LayerTar renders a source tree as an uncompressed, deterministic layer placed at Dest.
func (s LayerSpec) LayerTar() ([]byte, error) {
	return TreeTar(s.Src, strings.TrimPrefix(s.Dest, "/"))
}

// TreeTar renders a file or directory tree as an uncompressed, deterministic layer placed
// at dest (relative to the layer root; "" for the root itself, as for a runtime's rootfs).
func TreeTar(src, dest string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// Parent directories of the destination, so the layer is self-contained.
	if dest != "" {
		parts := strings.Split(dest, "/")
		for i := 1; i < len(parts); i++ {
			if err := writeDir(tw, strings.Join(parts[:i], "/"), 0o755); err != nil {
				return nil, err
			}
		}
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		if dest == "" {
			return nil, fmt.Errorf("%s is not a directory", src)
		}
		if err := writeEntry(tw, src, dest, fi); err != nil {
			return nil, err
		}
		return buf.Bytes(), tw.Close()
	}
	var paths []string
	err = filepath.WalkDir(src, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel, _ := filepath.Rel(src, p)
		name := dest
		switch {
		case rel == "." && dest == "":
			continue
		case rel == ".":
		case dest == "":
			name = filepath.ToSlash(rel)
		default:
			name = dest + "/" + filepath.ToSlash(rel)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		if err := writeEntry(tw, p, name, fi); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), tw.Close()
}

func writeDir(tw *tar.Writer, name string, mode int64) error {
	return tw.WriteHeader(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode, ModTime: FixedTime, Format: tar.FormatPAX})
}

// writeEntry writes one file system object. Hard links become copies; special files are
// written as they are so that validation names them.
func writeEntry(tw *tar.Writer, src, name string, fi fs.FileInfo) error {
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		var err error
		if link, err = os.Readlink(src); err != nil {
			return err
		}
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	h.Name = name
	if fi.IsDir() {
		h.Name += "/"
	}
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	h.ModTime, h.AccessTime, h.ChangeTime = FixedTime, time.Time{}, time.Time{}
	h.Format = tar.FormatPAX
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if fi.Mode().IsRegular() {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		if _, err := io.Copy(tw, f); err != nil {
			return err
		}
	}
	return nil
}

// LaunchLayerTar is the launch layer: launch.json alone at the archive root.
func LaunchLayerTar(l *Launch) ([]byte, error) {
	body, err := l.Marshal()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: LaunchFile, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)),
		ModTime: FixedTime, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(body); err != nil {
		return nil, err
	}
	return buf.Bytes(), tw.Close()
}
