package artifact

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
)

const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
	paxXattr       = "SCHILY.xattr."
)

// TarEntries reads a layer tar stream (named where in refusals) into entries, counting
// them against the layer set's budget. Entries whose path itself breaks a rule (absolute,
// '..', unknown type) are returned as violations instead.
func TarEntries(r io.Reader, b *Budget, where string) ([]Entry, []Violation, error) {
	var out []Entry
	vs, err := ReadTar(r, func(e Entry, _ io.Reader) error {
		if err := b.Take(where, e); err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, vs, nil
}

// ReadTar calls fn for every acceptable entry of a layer tar stream with the entry's
// content (regular files), and returns the entries refused by name (judgeName: paths
// leaving the layer or naming its root, odd whiteouts, hard links out of it) or type.
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
		n, rule, hint := judgeName(h.Name)
		if rule != "" {
			vs = append(vs, Violation{Path: h.Name, Rule: rule, Hint: hint})
			continue
		}
		e := Entry{Path: n.path, Mode: fs.FileMode(h.Mode & 0o777), UID: h.Uid, GID: h.Gid}
		if h.Mode&0o4000 != 0 {
			e.Mode |= fs.ModeSetuid
		}
		if h.Mode&0o2000 != 0 {
			e.Mode |= fs.ModeSetgid
		}
		switch {
		case n.opaque:
			e.Type, e.Opaque = TypeDir, true
			e.Mode = 0o755
		case n.whiteout:
			e.Type = TypeWhiteout
		default:
			switch h.Typeflag {
			case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives still use TypeRegA
				e.Type = TypeFile
			case tar.TypeDir:
				e.Type = TypeDir
			case tar.TypeSymlink:
				e.Type, e.Linkname = TypeSymlink, h.Linkname
			case tar.TypeLink:
				t, rule := judgeHardlinkTarget(h.Linkname)
				if rule != "" {
					vs = append(vs, Violation{Path: h.Name, Rule: rule, Hint: fmt.Sprintf("target %q must be a path inside the layer, not its root", h.Linkname)})
					continue
				}
				e.Type, e.Linkname = TypeHardlink, t
			case tar.TypeChar, tar.TypeBlock:
				e.Type = TypeDevice
			case tar.TypeFifo:
				e.Type = TypeFIFO
			default:
				vs = append(vs, Violation{Path: h.Name, Rule: RuleEntryType, Hint: "only files, directories, symlinks and hardlinks are allowed"})
				continue
			}
			if e.Path == "." && e.Type != TypeDir {
				vs = append(vs, Violation{Path: h.Name, Rule: RuleLayerRoot, Hint: "only a directory entry may name the layer root"})
				continue
			}
		}
		paxXattrs(&e, h.PAXRecords)
		if err := fn(e, h, tr); err != nil {
			return nil, err
		}
	}
}

// paxXattrs records an entry's extended attributes, all of them for the rules to judge.
// None makes a directory opaque: in a tar stream that is the .wh..wh..opq marker's job, and
// neither unpacker sets an overlay attribute from an archive (containerd drops every
// trusted.* one, Brewlet's installer refuses them), so the kernel would not see it either.
func paxXattrs(e *Entry, recs map[string]string) {
	for k, val := range recs {
		name, ok := strings.CutPrefix(k, paxXattr)
		if !ok {
			continue
		}
		e.Xattrs = append(e.Xattrs, name)
		if e.XattrValues == nil {
			e.XattrValues = map[string]string{}
		}
		e.XattrValues[name] = val
	}
	sort.Strings(e.Xattrs)
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
