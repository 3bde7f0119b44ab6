package artifact

import (
	"path"
	"strings"
)

// Names in a layer tar stream are judged before anything else looks at them, by both the
// node's extractor (runtime layers) and the build-time validator (application layers): an
// entry must name one path strictly inside its layer — after cleaning, after a whiteout's
// prefix is stripped, and for a hard link its target too. The finding this closes: a
// runtime layer entry ".wh..." stripped to ".." and the extractor replaced its own
// workspace with a whiteout device. Every name that could leave the layer, name its root
// where an entry cannot be, or carry a whiteout prefix where no whiteout can be, is
// refused as a LayerPathViolation instead of being interpreted.

// Rule names of the name judgement (LayerPathViolation messages).
const (
	RuleWhiteoutName   = "whiteout names no entry of its directory"
	RuleWhiteoutParent = "whiteout or opaque marker used as a directory"
	RuleLayerRoot      = "names the layer root"
	RuleHardlinkTarget = "hardlink target outside the layer"
)

// entryName is what a tar entry's name means in the layer.
type entryName struct {
	path     string // cleaned, relative; "." is the layer root
	whiteout bool   // deletes path in lower layers
	opaque   bool   // path is an opaque directory (a .wh..wh..opq marker)
}

// judgeName turns an archive name into the path it affects, or the rule it breaks with a
// hint. Absolute names and '..' components are refused before cleaning (a cleaned "a/../b"
// would hide that the archive tried); whiteout and opaque prefixes are judged on the last
// component only, where overlayfs's tar convention puts them.
func judgeName(name string) (entryName, string, string) {
	p, bad := cleanEntryPath(name)
	if bad != "" {
		return entryName{}, bad, "archive paths must be relative and stay inside the layer"
	}
	dir, base := path.Dir(p), path.Base(p)
	if dir != "." {
		for _, c := range strings.Split(dir, "/") {
			if strings.HasPrefix(c, whiteoutPrefix) {
				return entryName{}, RuleWhiteoutParent, "a .wh. name deletes an entry or marks its directory opaque; it cannot hold entries"
			}
		}
	}
	switch {
	case base == opaqueMarker:
		return entryName{path: dir, opaque: true}, "", ""
	case strings.HasPrefix(base, whiteoutPrefix):
		target := strings.TrimPrefix(base, whiteoutPrefix)
		if !plainName(target) || strings.HasPrefix(target, whiteoutPrefix) {
			// ".wh." names nothing, ".wh.." the directory itself, ".wh..." its parent, and
			// ".wh..wh.*" (other than the opaque marker) is aufs metadata no overlay reads.
			return entryName{}, RuleWhiteoutName, "a whiteout is .wh.<name> deleting <name> beside it; rebuild the layer with the image builder's own whiteouts"
		}
		return entryName{path: path.Join(dir, target), whiteout: true}, "", ""
	}
	return entryName{path: p}, "", ""
}

// plainName reports whether s is one directory entry name: not empty, not "." or "..", no
// slash.
func plainName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.Contains(s, "/")
}

// judgeHardlinkTarget returns a hard link's target as a cleaned path strictly inside the
// layer (never the root, which is a directory and cannot be linked), or the rule it breaks.
func judgeHardlinkTarget(link string) (string, string) {
	t, bad := cleanEntryPath(link)
	if bad != "" || t == "." {
		return "", RuleHardlinkTarget
	}
	for _, c := range strings.Split(t, "/") {
		if strings.HasPrefix(c, whiteoutPrefix) {
			return "", RuleHardlinkTarget // no such name exists once whiteouts are converted
		}
	}
	return t, ""
}

// InLayer reports whether p names an entry strictly inside a layer: relative, clean, no
// '..', not the layer root. The extractor checks every host path it creates with it, so a
// name the judgement above let through by mistake still cannot leave the layer.
func InLayer(p string) bool {
	if p == "" || p == "." || path.IsAbs(p) || path.Clean(p) != p {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return false
		}
	}
	return true
}
