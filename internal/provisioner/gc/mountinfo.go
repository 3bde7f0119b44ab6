package gc

import (
	"strconv"
	"strings"
)

// mountedNames returns every path component in a mount table (/proc/<pid>/mountinfo) that
// has the form of a cached layer's name: 64 lowercase hex digits. A layer is in use when its
// name appears anywhere in the table — mount root, mount point, source or super options —
// because the path prefix cannot be trusted to be there:
//   - containerd's mount code compacts a long overlay option string by changing into the
//     lower directories' common parent and passing relative lowerdirs (the kernel shows
//     "lowerdir=brewlet/layers/<hex>:containerd/...", without /var/lib);
//   - an idmapped overlay's lowerdirs go through a temporary idmapped mount of that
//     common parent (".../ovl-idmapped123/brewlet/layers/<hex>"), unmounted once the
//     overlay holds its layers;
//   - newer kernels list layers one by one ("lowerdir+=", "datadir+=");
//   - a bind mount of a layer shows it as its root, relative to its filesystem.
//
// A 64-hex component that is not one of our layers only keeps something longer: matching
// errs on the side of keeping.
func mountedNames(table string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		for _, tok := range strings.FieldsFunc(unescapeMountinfo(line), isPathSeparator) {
			if isLayerName(tok) {
				out[tok] = true
			}
		}
	}
	return out
}

// isPathSeparator splits mountinfo fields into path components: '/' inside paths, ':'
// between lowerdirs, ',' and '=' in options, '\' from overlay's escaping, and blanks
// between fields.
func isPathSeparator(r rune) bool {
	switch r {
	case '/', ':', ',', '=', '\\', ' ', '\t':
		return true
	}
	return false
}

func isLayerName(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// unescapeMountinfo decodes the kernel's octal escapes (\040 space, \011 tab, \012
// newline, \134 backslash) so an escaped separator cannot glue two components together.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
