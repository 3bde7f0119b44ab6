package promise

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Change is one difference between two generations' promises.
type Change struct {
	// Kind: "removed", "changed" or "added".
	Kind string `json:"kind"`
	// What the change is about: "line", "account", "path", "executable", "library",
	// "symbol-version", "interpreter", "env" or "manifest".
	What string `json:"what"`
	// Item names it: "python", "uid", "/usr/bin", "/usr/bin: python3", "libssl.so.3",
	// "libc.so.6: GLIBC_2.36".
	Item string `json:"item"`
	Old  string `json:"old,omitempty"`
	New  string `json:"new,omitempty"`
	// Breaking: applications relying on the old promise may fail (every removal or change).
	Breaking bool `json:"breaking"`
}

func (c Change) String() string {
	switch c.Kind {
	case "changed":
		return fmt.Sprintf("%s %s changed: %q -> %q", c.What, c.Item, c.Old, c.New)
	default:
		return fmt.Sprintf("%s %s %s", c.What, c.Item, c.Kind)
	}
}

// Breaking is the breaking changes of cs.
func Breaking(cs []Change) []Change {
	var out []Change
	for _, c := range cs {
		if c.Breaking {
			out = append(out, c)
		}
	}
	return out
}

// Summary says the breaking changes in one line, at most max of them named.
func Summary(cs []Change, max int) string {
	b := Breaking(cs)
	if len(b) == 0 {
		return "keeps the promise"
	}
	var parts []string
	for _, c := range b[:min(len(b), max)] {
		parts = append(parts, c.String())
	}
	if more := len(b) - len(parts); more > 0 {
		parts = append(parts, fmt.Sprintf("%d more", more))
	}
	return strings.Join(parts, "; ")
}

// Diff lists what new changes of old's promise, sorted: breaking changes first.
func Diff(old, new Manifest) []Change {
	var cs []Change
	add := func(kind, what, item, o, n string) {
		cs = append(cs, Change{Kind: kind, What: what, Item: item, Old: o, New: n, Breaking: kind != "added"})
	}
	if old.Version != new.Version {
		add("changed", "manifest", "version", fmt.Sprint(old.Version), fmt.Sprint(new.Version))
		return cs
	}
	for _, t := range new.Truncated {
		if !slices.Contains(old.Truncated, t) {
			// What was not read cannot be compared: reported, not counted as breaking.
			cs = append(cs, Change{Kind: "changed", What: "manifest", Item: "truncated: " + t})
		}
	}
	diffMap(old.Lines, new.Lines, "line", add)
	oa, na := old.Account, new.Account
	for _, f := range []struct{ item, o, n string }{
		{"uid", fmt.Sprint(oa.UID), fmt.Sprint(na.UID)}, {"gid", fmt.Sprint(oa.GID), fmt.Sprint(na.GID)},
		{"user", oa.User, na.User}, {"group", oa.Group, na.Group}, {"home", oa.Home, na.Home}, {"shell", oa.Shell, na.Shell},
	} {
		switch {
		case f.o == f.n:
		case f.o == "":
			add("added", "account", f.item, "", f.n)
		case f.n == "":
			add("removed", "account", f.item, f.o, "")
		default:
			add("changed", "account", f.item, f.o, f.n)
		}
	}
	newPath := map[string][]string{}
	for _, e := range new.Path {
		newPath[e.Dir] = e.Executables
	}
	oldPath := map[string]bool{}
	for _, e := range old.Path {
		oldPath[e.Dir] = true
		exes, ok := newPath[e.Dir]
		if !ok {
			add("removed", "path", e.Dir, "", "")
			continue
		}
		diffSet(e.Executables, exes, "executable", e.Dir+": ", add)
	}
	for _, e := range new.Path {
		if !oldPath[e.Dir] {
			add("added", "path", e.Dir, "", "")
		}
	}
	if !slices.Equal(dirs(old.Path), dirs(new.Path)) && sameSet(dirs(old.Path), dirs(new.Path)) {
		add("changed", "path", "order", strings.Join(dirs(old.Path), ":"), strings.Join(dirs(new.Path), ":"))
	}
	newLibs := map[string]Library{}
	for _, l := range new.Libraries {
		newLibs[l.Soname] = l
	}
	oldLibs := map[string]bool{}
	for _, l := range old.Libraries {
		oldLibs[l.Soname] = true
		nl, ok := newLibs[l.Soname]
		if !ok {
			add("removed", "library", l.Soname, l.Path, "")
			continue
		}
		diffSet(l.Versions, nl.Versions, "symbol-version", l.Soname+": ", add)
	}
	for _, l := range new.Libraries {
		if !oldLibs[l.Soname] {
			add("added", "library", l.Soname, "", l.Path)
		}
	}
	diffSet(old.Interpreters, new.Interpreters, "interpreter", "", add)
	diffMap(old.Env, new.Env, "env", add)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Breaking && !cs[j].Breaking })
	return cs
}

func diffMap(old, new map[string]string, what string, add func(kind, what, item, o, n string)) {
	for _, k := range slices.Sorted(maps.Keys(old)) {
		n, ok := new[k]
		switch {
		case !ok:
			add("removed", what, k, old[k], "")
		case n != old[k]:
			add("changed", what, k, old[k], n)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(new)) {
		if _, ok := old[k]; !ok {
			add("added", what, k, "", new[k])
		}
	}
}

func diffSet(old, new []string, what, prefix string, add func(kind, what, item, o, n string)) {
	inOld, inNew := set(old), set(new)
	for _, x := range old {
		if !inNew[x] {
			add("removed", what, prefix+x, "", "")
		}
	}
	for _, x := range new {
		if !inOld[x] {
			add("added", what, prefix+x, "", "")
		}
	}
}

func set(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func dirs(p []PathEntry) []string {
	out := make([]string, len(p))
	for i, e := range p {
		out[i] = e.Dir
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}
