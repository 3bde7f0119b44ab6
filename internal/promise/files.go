package promise

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

const (
	maxLinkHops = 40
	maxWalk     = 500_000 // entries looked at for libraries
	maxELFSize  = 1 << 30 // an object larger than this is not parsed
)

// reader reads one generation's files into m.
type reader struct {
	fsys fs.FS
	m    *Manifest
}

// resolve follows symbolic links in p as a process rooted at the generation's root would
// see them: an absolute target starts again at that root and ".." stops there, so nothing
// outside it is ever named. It returns the path without links and what it is.
func (r *reader) resolve(p string) (string, fs.FileInfo, error) {
	rest := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	cur := ""
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			if cur == "." || cur == "/" {
				cur = ""
			}
			continue
		}
		next := path.Join(cur, c)
		fi, err := fs.Lstat(r.fsys, next)
		if err != nil {
			return "", nil, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			if len(rest) == 0 {
				return cur, fi, nil
			}
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", nil, fmt.Errorf("/%s: too many links", p)
		}
		target, err := fs.ReadLink(r.fsys, next)
		if err != nil {
			return "", nil, err
		}
		if strings.HasPrefix(target, "/") {
			cur = ""
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	if cur == "" {
		fi, err := fs.Stat(r.fsys, ".")
		return ".", fi, err
	}
	fi, err := fs.Lstat(r.fsys, cur)
	return cur, fi, err
}

// path records each PATH entry's executables and the interpreters they name.
func (r *reader) path(value string) error {
	if value == "" {
		return nil
	}
	dirs := strings.Split(value, ":")
	if len(dirs) > MaxPathEntries {
		r.m.truncate("path")
		dirs = dirs[:MaxPathEntries]
	}
	for _, d := range dirs {
		entry := PathEntry{Dir: bound(d)}
		real, fi, err := r.resolve(d)
		if err != nil || !fi.IsDir() {
			r.m.Path = append(r.m.Path, entry) // listed, empty: a directory PATH names but the image lacks
			continue
		}
		entries, err := fs.ReadDir(r.fsys, real)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if len(entry.Executables) >= MaxExecutables {
				r.m.truncate("executables in " + bound(d))
				break
			}
			p, fi, err := r.resolve(path.Join(real, e.Name()))
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
				continue
			}
			entry.Executables = append(entry.Executables, bound(e.Name()))
			if interp := r.interpreter(p, fi); interp != "" {
				if ip, ifi, err := r.resolve(interp); err == nil && ifi.Mode().IsRegular() && ip != "" {
					r.m.Interpreters = append(r.m.Interpreters, bound(interp))
				}
			}
		}
		sort.Strings(entry.Executables)
		r.m.Path = append(r.m.Path, entry)
	}
	return nil
}

// interpreter is the program interpreter an ELF executable names ("" for none, or for a
// file that is not ELF).
func (r *reader) interpreter(p string, fi fs.FileInfo) string {
	f, closeIt, ok := r.openELF(p, fi)
	if !ok {
		return ""
	}
	defer closeIt()
	interp := ""
	func() {
		defer func() { _ = recover() }() // a malformed object says nothing; it is not trusted to parse
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP && prog.Filesz > 0 && prog.Filesz < 4096 {
				b := make([]byte, prog.Filesz)
				if _, err := prog.ReadAt(b, 0); err == nil {
					interp = strings.TrimRight(string(b), "\x00")
				}
			}
		}
	}()
	return interp
}

// openELF opens p as an ELF object when it is one and its file can be read at offsets.
func (r *reader) openELF(p string, fi fs.FileInfo) (*elf.File, func(), bool) {
	if fi.Size() < 64 || fi.Size() > maxELFSize {
		return nil, nil, false
	}
	file, err := r.fsys.Open(p)
	if err != nil {
		return nil, nil, false
	}
	ra, ok := file.(io.ReaderAt)
	if !ok {
		_ = file.Close()
		return nil, nil, false
	}
	magic := make([]byte, 4)
	if _, err := ra.ReadAt(magic, 0); err != nil || string(magic) != elf.ELFMAG {
		_ = file.Close()
		return nil, nil, false
	}
	var f *elf.File
	func() {
		defer func() { _ = recover() }()
		f, err = elf.NewFile(io.NewSectionReader(ra, 0, fi.Size()))
	}()
	if f == nil || err != nil {
		_ = file.Close()
		return nil, nil, false
	}
	return f, func() { _ = f.Close(); _ = file.Close() }, true
}

// libraries records every shared object with a soname, by soname: the first found in path
// order when two files carry the same one.
func (r *reader) libraries() error {
	seen := map[string]bool{}
	walked := 0
	err := fs.WalkDir(r.fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable directory holds nothing this manifest can promise
		}
		if walked++; walked > maxWalk {
			r.m.truncate("libraries")
			return fs.SkipAll
		}
		if !d.Type().IsRegular() || !strings.Contains(d.Name(), ".so") {
			return nil
		}
		if len(r.m.Libraries) >= MaxLibraries {
			r.m.truncate("libraries")
			return fs.SkipAll
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		f, closeIt, ok := r.openELF(p, fi)
		if !ok {
			return nil
		}
		defer closeIt()
		lib, ok := library(f)
		if !ok || seen[lib.Soname] {
			return nil
		}
		seen[lib.Soname] = true
		lib.Path = bound(p)
		r.m.Libraries = append(r.m.Libraries, lib)
		return nil
	})
	if err != nil && !errors.Is(err, fs.SkipAll) {
		return err
	}
	sort.Slice(r.m.Libraries, func(i, j int) bool { return r.m.Libraries[i].Soname < r.m.Libraries[j].Soname })
	return nil
}

// library reads an object's soname and the symbol versions it defines (its own base
// version, the soname itself, left out).
func library(f *elf.File) (lib Library, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	names, err := f.DynString(elf.DT_SONAME)
	if err != nil || len(names) == 0 || names[0] == "" {
		return Library{}, false
	}
	lib.Soname = bound(names[0])
	vers, err := f.DynamicVersions()
	if err == nil {
		for _, v := range vers {
			if v.Flags&elf.VER_FLG_BASE != 0 || v.Name == "" {
				continue
			}
			if len(lib.Versions) >= MaxVersionsPerSO {
				break
			}
			lib.Versions = append(lib.Versions, bound(v.Name))
		}
	}
	sort.Strings(lib.Versions)
	return lib, true
}
