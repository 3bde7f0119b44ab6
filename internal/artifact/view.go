package artifact

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// View is the composed tree of layers with overlay semantics, used to judge links (and a
// runtime's files) on what the kernel will show rather than on each layer's text.
//
// Every path is a node linked into its parent's children, including parents no layer lists
// (tar streams may omit them), so hiding a subtree costs the size of that subtree: each
// entry is inserted once and removed at most once, and composing a layer set is linear in
// its path bytes however many whiteouts and opaque directories it holds.
type View struct {
	nodes map[string]*node // path ("." is the root) -> node
}

type node struct {
	entry Entry
	layer int
	real  bool                // an entry of some layer, not only the parent of one
	kids  map[string]struct{} // paths of the child nodes
}

// NewView returns an empty view.
func NewView() *View { return &View{nodes: map[string]*node{".": {}}} }

// Apply adds one layer's entries on top of the view, as overlayfs stacks a lower layer
// over the ones below it.
func (v *View) Apply(layer int, entries []Entry) {
	// Whiteouts and opaque directories hide lower content before this layer's entries land.
	// On a layer's root the kernel honours neither (tested against a real mount).
	for _, e := range entries {
		switch {
		case e.Path == ".":
		case e.Type == TypeWhiteout:
			v.remove(e.Path)
		case e.Type == TypeDir && e.Opaque:
			v.clear(e.Path)
		}
	}
	for _, e := range entries {
		if e.Type == TypeWhiteout || (e.Path == "." && e.Type != TypeDir) {
			continue
		}
		n := v.node(e.Path)
		if e.Type != TypeDir {
			// A non-directory ends the merge: nothing of lower layers shows below it.
			v.clear(e.Path)
		}
		n.entry, n.layer, n.real = e, layer, true
	}
}

// node returns the node of p, creating it and linking missing parents.
func (v *View) node(p string) *node {
	if n, ok := v.nodes[p]; ok {
		return n
	}
	n := &node{}
	v.nodes[p] = n
	for child, parent := p, path.Dir(p); ; child, parent = parent, path.Dir(parent) {
		pn, ok := v.nodes[parent]
		if !ok {
			pn = &node{}
			v.nodes[parent] = pn
		}
		if pn.kids == nil {
			pn.kids = map[string]struct{}{}
		}
		pn.kids[child] = struct{}{}
		if ok {
			return n
		}
	}
}

// remove deletes p and everything below it.
func (v *View) remove(p string) {
	if _, ok := v.nodes[p]; !ok {
		return
	}
	v.clear(p)
	delete(v.nodes, p)
	delete(v.nodes[path.Dir(p)].kids, p)
}

// clear deletes everything below p, without recursion (paths can be thousands deep).
func (v *View) clear(p string) {
	n := v.nodes[p]
	if n == nil || len(n.kids) == 0 {
		return
	}
	stack := make([]string, 0, len(n.kids))
	for k := range n.kids {
		stack = append(stack, k)
	}
	n.kids = nil
	for len(stack) > 0 {
		k := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for kk := range v.nodes[k].kids {
			stack = append(stack, kk)
		}
		delete(v.nodes, k)
	}
}

// maxLinkHops bounds symlink resolution like the kernel's ELOOP limit.
const maxLinkHops = 40

// LayerOf returns the index of the layer that provides a path of the view.
func (v *View) LayerOf(p string) (int, bool) {
	n, ok := v.nodes[p]
	if !ok || !n.real {
		return 0, false
	}
	return n.layer, true
}

// Lookup returns the entry at a path of the view, without following links.
func (v *View) Lookup(p string) (Entry, bool) {
	n, ok := v.nodes[p]
	if !ok || !n.real {
		return Entry{}, false
	}
	return n.entry, true
}

// Children returns the names directly below directory p, sorted: entries, and the
// directories no layer lists but that hold entries (a tar stream may omit parents).
func (v *View) Children(p string) []string {
	n, ok := v.nodes[p]
	if !ok {
		return nil
	}
	out := make([]string, 0, len(n.kids))
	for k := range n.kids {
		if c := v.nodes[k]; c.real || len(c.kids) > 0 {
			out = append(out, path.Base(k))
		}
	}
	sort.Strings(out)
	return out
}

// Implied reports whether p is a directory only by holding entries: no layer lists it.
func (v *View) Implied(p string) bool {
	n, ok := v.nodes[p]
	return ok && !n.real && len(n.kids) > 0
}

// Entries calls fn for every entry of the view in path order.
func (v *View) Entries(fn func(Entry)) {
	paths := make([]string, 0, len(v.nodes))
	for p, n := range v.nodes {
		if n.real {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		fn(v.nodes[p].entry)
	}
}

// Resolve follows symlinks of the view the way the kernel would inside the container (an
// absolute target starts at the container root; ".." at the root stays there) and returns
// the final path, relative to the root. Unknown components (runtime files, dangling names)
// are taken literally.
func (v *View) Resolve(p string) (string, bool) { return v.ResolveVisit(p, nil) }

// ResolveVisit is Resolve calling visit (when not nil) with every path it passes through
// as a directory on the way, in order, the final path included: what the kernel searches
// to reach p. Symlinks are not visited; their targets are.
func (v *View) ResolveVisit(p string, visit func(dir string)) (string, bool) {
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
		if e, ok := v.Lookup(next); ok && e.Type == TypeSymlink {
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
		if visit != nil {
			visit(dir)
		}
	}
	return dir, true
}

// checkLinks judges every symlink and hardlink of the composed view.
func (v *View) checkLinks(b *Budget) ([]Violation, error) {
	var out []Violation
	var err error
	i := 0
	v.Entries(func(e Entry) {
		if err != nil {
			return
		}
		if i++; i%deadlineStride == 0 {
			if err = b.Alive("link resolution"); err != nil {
				return
			}
		}
		n := v.nodes[e.Path]
		switch e.Type {
		case TypeSymlink:
			if final, ok := v.Resolve(e.Path); !ok || !UnderApp(final) {
				out = append(out, Violation{Layer: n.layer, Path: e.Path, Rule: RuleSymlinkEscape,
					Hint: fmt.Sprintf("target %q resolves outside /app in the composed layers; point it inside /app or copy the file (for Python venvs use --copies)", e.Linkname)})
			}
		case TypeHardlink:
			if t, bad := cleanEntryPath(e.Linkname); bad != "" || !UnderApp(t) {
				out = append(out, Violation{Layer: n.layer, Path: e.Path, Rule: RuleHardlink,
					Hint: fmt.Sprintf("target %q is not under app/", e.Linkname)})
			}
		}
	})
	return out, err
}
