package artifact

import (
	"archive/tar"
	"io"
	"io/fs"
	"path"
	"strings"
)

const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
	paxXattr       = "SCHILY.xattr."
)

// opaqueXattrs are the overlay opaque markers a directory may carry.
var opaqueXattrs = map[string]bool{"trusted.overlay.opaque": true, "user.overlay.opaque": true}

// TarEntries reads a layer tar stream into entries. Entries whose path itself breaks a
// rule (absolute, '..', unknown type) are returned as violations instead.
func TarEntries(r io.Reader) ([]Entry, []Violation, error) {
	var out []Entry
	vs, err := ReadTar(r, func(e Entry, _ io.Reader) error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, vs, nil
}

// ReadTar calls fn for every acceptable entry of a layer tar stream with the entry's
// content (regular files), and returns the entries refused by path or type.
func ReadTar(r io.Reader, fn func(Entry, io.Reader) error) ([]Violation, error) {
	return ReadTarHeaders(r, func(e Entry, _ *tar.Header, body io.Reader) error { return fn(e, body) })
}

// ReadTarHeaders is ReadTar with the raw header, for extraction.
func ReadTarHeaders(r io.Reader, fn func(Entry, *tar.Header, io.Reader) error) ([]Violation, error) {
	tr := tar.NewReader(r)
	var vs []Violation
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return vs, nil
		}
		if err != nil {
			return nil, err
		}
		if isSparse(h) {
			// A sparse entry expands to its logical size on extraction: a tiny layer could
			// fill a disk. Image builders never produce them.
			vs = append(vs, Violation{Path: h.Name, Rule: RuleEntryType, Hint: "sparse files are not supported"})
			continue
		}
		p, bad := cleanEntryPath(h.Name)
		if bad != "" {
			vs = append(vs, Violation{Path: h.Name, Rule: bad, Hint: "archive paths must be relative and stay under app/"})
			continue
		}
		e := Entry{Path: p, Mode: fs.FileMode(h.Mode & 0o777), UID: h.Uid, GID: h.Gid}
		if h.Mode&0o4000 != 0 {
			e.Mode |= fs.ModeSetuid
		}
		if h.Mode&0o2000 != 0 {
			e.Mode |= fs.ModeSetgid
		}
		for k, val := range h.PAXRecords {
			if name, ok := strings.CutPrefix(k, paxXattr); ok {
				if opaqueXattrs[name] && val == "y" {
					e.Opaque = true
				} else {
					e.Xattrs = append(e.Xattrs, name)
					if e.XattrValues == nil {
						e.XattrValues = map[string]string{}
					}
					e.XattrValues[name] = val
				}
			}
		}
		base := path.Base(p)
		switch {
		case base == opaqueMarker:
			e.Path, e.Type, e.Opaque = path.Dir(p), TypeDir, true
			e.Mode = 0o755
		case strings.HasPrefix(base, whiteoutPrefix):
			e.Path, e.Type = path.Join(path.Dir(p), strings.TrimPrefix(base, whiteoutPrefix)), TypeWhiteout
		default:
			switch h.Typeflag {
			case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives still use TypeRegA
				e.Type = TypeFile
			case tar.TypeDir:
				e.Type = TypeDir
			case tar.TypeSymlink:
				e.Type, e.Linkname = TypeSymlink, h.Linkname
			case tar.TypeLink:
				e.Type, e.Linkname = TypeHardlink, h.Linkname
			case tar.TypeChar, tar.TypeBlock:
				e.Type = TypeDevice
			case tar.TypeFifo:
				e.Type = TypeFIFO
			default:
				vs = append(vs, Violation{Path: h.Name, Rule: RuleEntryType, Hint: "only files, directories, symlinks and hardlinks are allowed"})
				continue
			}
		}
		if err := fn(e, h, tr); err != nil {
			return nil, err
		}
	}
}

func isSparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}
