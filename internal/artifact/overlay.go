package artifact

import "strings"

// Overlay's on-disk format as Linux overlayfs reads it from lower layers. Brewlet's overlay
// mounts (containerd's snapshots and the runtime's cached layers, mounted by root) read the
// trusted.overlay.* namespace; user.overlay.* is read only by mounts with "userxattr", which
// Brewlet never makes.
const (
	// OpaqueXattr marks a directory whose lower layers' content is hidden.
	OpaqueXattr = "trusted.overlay.opaque"
	// opaqueValue is the only value the kernel takes as opaque: it reads one byte and
	// compares it with 'y' (a longer value fails the read with ERANGE), so "yes", "n", ""
	// or "x" leave the directory merged.
	opaqueValue = "y"
)

// IsOverlayXattr reports whether overlayfs may interpret an extended attribute (opaque,
// redirect, metacopy, origin, whiteout, ...) under some mount of the layer. Any such
// attribute except an opaque marker changes what the kernel shows in ways the composed
// view does not model, so validators refuse them instead of guessing.
func IsOverlayXattr(name string) bool {
	return strings.HasPrefix(name, "trusted.overlay.") || strings.HasPrefix(name, "user.overlay.")
}

// isOpaqueMarker reports whether an extended attribute makes a directory opaque exactly
// when the kernel would. A layer's root is never opaque (the kernel does not consult the
// marker there); the view ignores it, see View.Apply.
func isOpaqueMarker(name, value string, dir bool) bool {
	return dir && name == OpaqueXattr && value == opaqueValue
}

// overlayXattrs returns the overlay attributes among an entry's extended attributes.
func overlayXattrs(e Entry) []string {
	var out []string
	for _, x := range e.Xattrs {
		if IsOverlayXattr(x) {
			out = append(out, x)
		}
	}
	return out
}
