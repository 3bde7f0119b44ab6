package artifact

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"brewlet.sh/brewlet/internal/vocab"
)

// AppDir is the only top-level directory application layers may populate.
const AppDir = "app"

// EntryType is what a layer entry is, independent of how it was stored (tar or directory).
type EntryType int

const (
	TypeFile EntryType = iota
	TypeDir
	TypeSymlink
	TypeHardlink
	TypeWhiteout // deletes the same-named entry of lower layers
	TypeDevice
	TypeFIFO
	TypeSocket
)

func (t EntryType) String() string {
	return [...]string{"file", "directory", "symlink", "hardlink", "whiteout", "device", "FIFO", "socket"}[t]
}

// Entry is one entry of an application layer, as both front ends see it.
type Entry struct {
	Path     string // relative to the layer root, cleaned, no leading "./" or "/"
	Type     EntryType
	Mode     fs.FileMode // permission bits plus fs.ModeSetuid, fs.ModeSetgid
	Linkname string      // symlink target, or hardlink target path within the layer
	Opaque   bool        // directory hides lower layers' content (overlay opaque marker)
	Xattrs   []string    // extended attribute names other than the opaque marker
	UID, GID int         // owner (runtime layers keep it; application layers ignore it)
	// XattrValues holds the values of Xattrs where the front end has them (tar).
	XattrValues map[string]string
}

// Rule names, as they appear in LayerPathViolation messages.
const (
	RuleOutsideApp    = "outside app/"
	RuleAbsolute      = "absolute path"
	RuleDotDot        = "'..' component"
	RuleSpecialFile   = "device, FIFO or socket"
	RuleSetID         = "setuid/setgid"
	RuleXattr         = "extended attribute"
	RuleWhiteout      = "whiteout outside app/"
	RuleUnreadable    = "not world-readable"
	RuleNotSearchable = "directory not world-readable and searchable"
	RuleSymlinkEscape = "symlink escapes app/"
	RuleHardlink      = "hardlink outside app/"
	RuleEntryType     = "unsupported entry type"
)

// Violation is one broken rule, with where it was found.
type Violation struct {
	Layer int    // index among the application layers, from the lowest
	Path  string // entry path as stored
	Rule  string
	Hint  string
}

func (v Violation) err(layerName func(int) string) error {
	return vocab.Errorf(vocab.ReasonLayerPathViolation, "%s entry %q: %s; %s", layerName(v.Layer), v.Path, v.Rule, v.Hint)
}

// cleanEntryPath normalizes an archive path and reports a violation for absolute paths and
// '..' components. The returned path has no leading "./" and no trailing slash.
func cleanEntryPath(p string) (string, string) {
	if strings.HasPrefix(p, "/") {
		return "", RuleAbsolute
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", RuleDotDot
		}
	}
	return strings.TrimPrefix(path.Clean("./"+p), "./"), ""
}

// UnderApp reports whether a root-relative path is /app or below it.
func UnderApp(p string) bool { return p == AppDir || strings.HasPrefix(p, AppDir+"/") }

// checkEntry applies the per-entry rules (everything but link resolution).
func checkEntry(e Entry) (rule, hint string) {
	switch {
	case !UnderApp(e.Path) && (e.Type == TypeWhiteout || e.Opaque):
		return RuleWhiteout, "application layers may only delete files under /app"
	case !UnderApp(e.Path) && (e.Path != "." || e.Type != TypeDir):
		return RuleOutsideApp, "application and dependency layers may only contain files under /app"
	case e.Type == TypeDevice || e.Type == TypeFIFO || e.Type == TypeSocket:
		return RuleSpecialFile, "remove the " + e.Type.String() + " from the layer"
	case e.Mode&(fs.ModeSetuid|fs.ModeSetgid) != 0:
		return RuleSetID, "application files run without privileges; clear the setuid/setgid bit"
	case len(e.Xattrs) > 0:
		return RuleXattr, fmt.Sprintf("remove %v; only overlay opaque markers are allowed", e.Xattrs)
	case e.Type == TypeFile && e.Mode&0o004 == 0:
		return RuleUnreadable, "layers are world-readable by design (never package secrets); make it o+r"
	case e.Type == TypeDir && e.Mode&0o005 != 0o005:
		return RuleNotSearchable, "make it o+rx"
	}
	return "", ""
}

// View is the composed tree of layers (overlay semantics), used to judge links on what the
// container will see rather than on text. Runtime validation uses it too.
type View struct {
	entries map[string]Entry // path -> entry, after whiteouts
	layer   map[string]int
}

// NewView returns an empty view.
func NewView() *View { return &View{entries: map[string]Entry{}, layer: map[string]int{}} }

// Apply adds one layer's entries on top of the view.
func (v *View) Apply(layer int, entries []Entry) {
	// Opaque directories and whiteouts hide lower content before this layer's entries land.
	for _, e := range entries {
		if e.Type == TypeWhiteout {
			v.remove(e.Path)
		} else if e.Type == TypeDir && e.Opaque {
			v.removeBelow(e.Path)
		}
	}
	for _, e := range entries {
		if e.Type == TypeWhiteout {
			continue
		}
		if old, ok := v.entries[e.Path]; ok && old.Type == TypeDir && e.Type != TypeDir {
			v.removeBelow(e.Path)
		}
		v.entries[e.Path] = e
		v.layer[e.Path] = layer
	}
}

func (v *View) remove(p string) {
	delete(v.entries, p)
	delete(v.layer, p)
	v.removeBelow(p)
}

func (v *View) removeBelow(p string) {
	for k := range v.entries {
		if strings.HasPrefix(k, p+"/") {
			delete(v.entries, k)
			delete(v.layer, k)
		}
	}
}

// maxLinkHops bounds symlink resolution like the kernel's ELOOP limit.
const maxLinkHops = 40

// LayerOf returns the index of the layer that provides a path of the view.
func (v *View) LayerOf(p string) (int, bool) {
	i, ok := v.layer[p]
	return i, ok
}

// Lookup returns the entry at a path of the view, without following links.
func (v *View) Lookup(p string) (Entry, bool) {
	e, ok := v.entries[p]
	return e, ok
}

// Entries calls fn for every entry of the view in path order.
func (v *View) Entries(fn func(Entry)) {
	paths := make([]string, 0, len(v.entries))
	for p := range v.entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fn(v.entries[p])
	}
}

// Resolve follows symlinks of the view the way the kernel would inside the container (an
// absolute target starts at the container root; ".." at the root stays there) and returns
// the final path, relative to the root. Unknown components (runtime files, dangling names)
// are taken literally.
func (v *View) Resolve(p string) (string, bool) {
	hops := 0
	dir, rest := "", strings.Split(p, "/")
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			dir = path.Dir(dir)
			if dir == "." || dir == "/" {
				dir = ""
			}
			continue
		}
		next := c
		if dir != "" {
			next = dir + "/" + c
		}
		if e, ok := v.entries[next]; ok && e.Type == TypeSymlink {
			if hops++; hops > maxLinkHops {
				return "", false
			}
			if strings.HasPrefix(e.Linkname, "/") {
				dir = ""
			}
			rest = append(strings.Split(e.Linkname, "/"), rest...)
			continue
		}
		dir = next
	}
	return dir, true
}

// checkLinks judges every symlink and hardlink of the composed view.
func (v *View) checkLinks() []Violation {
	var out []Violation
	v.Entries(func(e Entry) {
		p := e.Path
		switch e.Type {
		case TypeSymlink:
			if final, ok := v.Resolve(p); !ok || !UnderApp(final) {
				out = append(out, Violation{Layer: v.layer[p], Path: p, Rule: RuleSymlinkEscape,
					Hint: fmt.Sprintf("target %q resolves outside /app in the composed layers; point it inside /app or copy the file (for Python venvs use --copies)", e.Linkname)})
			}
		case TypeHardlink:
			if t, bad := cleanEntryPath(e.Linkname); bad != "" || !UnderApp(t) {
				out = append(out, Violation{Layer: v.layer[p], Path: p, Rule: RuleHardlink,
					Hint: fmt.Sprintf("target %q is not under app/", e.Linkname)})
			}
		}
	})
	return out
}
