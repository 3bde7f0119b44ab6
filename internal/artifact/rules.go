package artifact

import (
	"fmt"
	"io/fs"
	"path"
	"strings"

	"brewlet.sh/brewlet/internal/vocab"
)

// AppDir is the only top-level directory application layers may populate.
const AppDir = "app"

// RulesVersion names the layer rules and the composition they judge on. Bump it with any
// change to either: nodes remember verdicts per layer set and version, and must not reuse
// a verdict of other rules.
const RulesVersion = 2

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

// SELinuxXattr holds a file's SELinux label. On SELinux nodes (RHEL-family, Bottlerocket)
// the policy writes it on every file containerd unpacks, so an application layer's
// snapshot carries it on every entry: that value is the node's and is accepted
// (Limits.NodeLabel). A layer can also bring its own (containerd applies an archive's
// attributes as they are); such a label is the layer's and is refused like every other
// attribute.
const SELinuxXattr = "security.selinux"

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
	case len(overlayXattrs(e)) > 0:
		return RuleXattr, fmt.Sprintf("remove %v: overlay attributes change what the kernel shows; mark an opaque directory with a .wh..wh..opq entry", overlayXattrs(e))
	case len(e.Xattrs) == 1 && e.Xattrs[0] == SELinuxXattr:
		return RuleXattr, fmt.Sprintf("the layer carries its own SELinux label %q (a node accepts only the label its policy gives containerd's snapshots); rebuild the image without %s attributes: the node labels files itself",
			e.XattrValues[SELinuxXattr], SELinuxXattr)
	case len(e.Xattrs) > 0:
		return RuleXattr, fmt.Sprintf("remove %v; only overlay opaque markers are allowed", e.Xattrs)
	case e.Type == TypeFile && e.Mode&0o004 == 0:
		return RuleUnreadable, "layers are world-readable by design (never package secrets); make it o+r"
	case e.Type == TypeDir && e.Mode&0o005 != 0o005:
		return RuleNotSearchable, "make it o+rx"
	}
	return "", ""
}
