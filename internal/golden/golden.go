// Package golden validates runtime ("golden") images: the rules a root filesystem and its
// config must meet before any node makes it current. Validation reads metadata and two
// small account files; it never runs image code.
package golden

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/vocab"
)

// Account files read for the runtime's user; anything larger is refused.
const (
	passwdPath     = "etc/passwd"
	groupPath      = "etc/group"
	maxAccountFile = 1 << 20
	capXattr       = "security.capability"
)

// Root is the composed root filesystem of a runtime image's layers.
type Root struct {
	view  *artifact.View
	files map[string][]byte // captured account files
	dirs  []string          // the extracted layers, lowest first (IndexDirLayersContext)
}

// IndexTarLayers composes uncompressed runtime layers, lowest first, as the node's
// installer will extract them. Entries with absolute or '..' paths, or with overlay
// attributes, make the whole image invalid.
func IndexTarLayers(layers []io.Reader) (*Root, error) {
	b := artifact.NewBudget(context.Background(), artifact.DefaultLimits())
	r := &Root{view: artifact.NewView(), files: map[string][]byte{}}
	for i, l := range layers {
		where := fmt.Sprintf("runtime layer %d", i+1)
		var entries []artifact.Entry
		files := map[string]int{} // regular file path -> index in entries, for hard links
		vs, err := artifact.ReadTar(l, func(e artifact.Entry, body io.Reader) error {
			if err := b.Take(where, e); err != nil {
				return err
			}
			if err := checkLayerEntry(where, e); err != nil {
				return err
			}
			switch e.Type {
			case artifact.TypeDevice:
				// The installer skips device nodes (a container's /dev comes from runc):
				// on the node they neither exist nor hide anything.
				return nil
			case artifact.TypeHardlink:
				// Installed, a hard link is a second name of its target's inode: same
				// mode, same attributes, whatever its own header says.
				if t, ok := files[path.Clean(e.Linkname)]; ok {
					link := entries[t]
					link.Path = e.Path
					e = link
				}
			}
			entries = append(entries, e)
			if e.Type == artifact.TypeFile {
				files[e.Path] = len(entries) - 1
			}
			if e.Type == artifact.TypeFile && (e.Path == passwdPath || e.Path == groupPath) {
				data, err := io.ReadAll(io.LimitReader(body, maxAccountFile+1))
				if err != nil {
					return err
				}
				if len(data) > maxAccountFile {
					return vocab.Errorf(vocab.ReasonInvalidAccountFiles, "/%s in runtime layer %d is over %d bytes", e.Path, i+1, maxAccountFile)
				}
				r.files[e.Path] = data
			}
			return nil
		})
		if err != nil {
			return nil, readErr(where, err)
		}
		if len(vs) > 0 {
			return nil, vocab.Errorf(vocab.ReasonLayerPathViolation, "runtime layer %d entry %q: %s; %s (a runtime layer holds paths inside itself only)", i+1, vs[0].Path, vs[0].Rule, vs[0].Hint)
		}
		r.view.Apply(i, entries)
	}
	// A whiteout or a later non-file entry removes a captured account file.
	for p := range r.files {
		if e, ok := r.view.Lookup(p); !ok || e.Type != artifact.TypeFile {
			delete(r.files, p)
		}
	}
	return r, nil
}

// IndexDirLayersContext composes extracted runtime layers (overlay format), lowest first,
// as the node's layer cache holds them, stopping with LimitExceeded when ctx ends or when
// the layers exceed artifact.DefaultLimits.
func IndexDirLayersContext(ctx context.Context, dirs []string) (*Root, error) {
	b := artifact.NewBudget(ctx, artifact.DefaultLimits())
	r := &Root{view: artifact.NewView(), files: map[string][]byte{}, dirs: dirs}
	for i, d := range dirs {
		where := fmt.Sprintf("runtime layer %d", i+1)
		entries, err := artifact.DirEntries(d, b, where)
		if err != nil {
			return nil, readErr(where, err)
		}
		for _, e := range entries {
			if err := checkLayerEntry(where, e); err != nil {
				return nil, err
			}
		}
		r.view.Apply(i, entries)
	}
	for _, p := range []string{passwdPath, groupPath} {
		e, ok := r.view.Lookup(p)
		if !ok || e.Type != artifact.TypeFile {
			continue
		}
		i, _ := r.view.LayerOf(p)
		data, err := readBounded(filepath.Join(dirs[i], p))
		if err != nil {
			return nil, err
		}
		r.files[p] = data
	}
	return r, nil
}

// checkLayerEntry refuses overlay attributes (an unpacked opaque marker "y" on a
// directory is not among them: the view models it). They are judged on every layer, not on
// the composed view: the kernel reads them on each layer of a merged directory, so one on a
// lower layer matters even where an upper layer provides the same path.
func checkLayerEntry(where string, e artifact.Entry) error {
	for _, x := range e.Xattrs {
		if artifact.IsOverlayXattr(x) {
			return vocab.Errorf(vocab.ReasonLayerPathViolation,
				"%s entry /%s carries the overlay attribute %s, which changes what the kernel shows; rebuild the layer without it (an opaque directory is marked with a .wh..wh..opq entry)", where, e.Path, x)
		}
	}
	return nil
}

// readErr keeps a refusal as it is (its message says where) and says where any other
// error happened.
func readErr(where string, err error) error {
	if vocab.ReasonOf(err) != "" {
		return err
	}
	return fmt.Errorf("read %s: %w", where, err)
}

func readBounded(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxAccountFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxAccountFile {
		return nil, vocab.Errorf(vocab.ReasonInvalidAccountFiles, "%s is over %d bytes", p, maxAccountFile)
	}
	return b, nil
}

// User is the runtime's identity for applications, as RuntimeImage.spec.user (api/v1alpha1) names it.
type User struct{ UID, GID int64 }

// Result is what validation learned about a valid runtime.
type Result struct {
	Path     string // the PATH value, "" when the runtime has none
	HasPath  bool
	Home     string // from the account files, "" without them
	UserName string
}

// Validate applies the runtime image rules to a composed root and its config Env.
func Validate(root *Root, env []string, user User) (*Result, error) {
	res := &Result{}
	if err := checkPrivileged(root); err != nil {
		return nil, err
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			res.Path, res.HasPath = v, true
		}
	}
	if res.HasPath {
		if err := checkPath(root, res.Path); err != nil {
			return nil, err
		}
	}
	if err := checkAccounts(root, user, res); err != nil {
		return nil, err
	}
	return res, nil
}

func checkPrivileged(root *Root) error {
	var err error
	root.view.Entries(func(e artifact.Entry) {
		if err != nil {
			return
		}
		if e.Mode&(fs.ModeSetuid|fs.ModeSetgid) != 0 && e.Type != artifact.TypeDir {
			err = vocab.Errorf(vocab.ReasonPrivilegedRuntimeFile, "/%s is setuid or setgid; applications run without privileges, so rebuild the runtime with the bit cleared (chmod u-s,g-s)", e.Path)
			return
		}
		for _, x := range e.Xattrs {
			if x == capXattr {
				err = vocab.Errorf(vocab.ReasonPrivilegedRuntimeFile, "/%s carries file capabilities (%s); remove them (setcap -r)", e.Path, capXattr)
				return
			}
		}
	})
	return err
}

func checkPath(root *Root, value string) error {
	bad := func(format string, args ...any) error {
		return vocab.Errorf(vocab.ReasonInvalidRuntimePath, "config Env PATH=%q: "+format, append([]any{value}, args...)...)
	}
	if value == "" {
		return bad("empty; remove PATH for a runtime without one")
	}
	for i, dir := range strings.Split(value, ":") {
		switch {
		case dir == "":
			return bad("entry %d is empty (an empty entry means the working directory)", i+1)
		case !path.IsAbs(dir):
			return bad("entry %d %q is relative; every entry must be absolute", i+1, dir)
		case hasDotComponent(dir):
			return bad("entry %d %q contains '.' or '..'", i+1, dir)
		}
		rel := strings.TrimPrefix(path.Clean(dir), "/")
		if artifact.UnderApp(rel) {
			return bad("entry %d %q points into /app, which belongs to applications", i+1, dir)
		}
		final, ok := root.view.Resolve(rel)
		if ok && artifact.UnderApp(final) {
			return bad("entry %d %q resolves into /app, which belongs to applications", i+1, dir)
		}
		e, found := root.view.Lookup(final)
		if !ok || (!found && final != "") || (found && e.Type != artifact.TypeDir) {
			return bad("entry %d %q is not a directory in the image", i+1, dir)
		}
		if err := checkPathOwners(root, rel); err != nil {
			return bad("entry %d %q: %v", i+1, dir, err)
		}
	}
	return nil
}

// checkPathOwners refuses a PATH entry that a process other than root could change: every
// directory the kernel searches to reach it (symlinks followed, as the container will)
// must be owned by root and not writable by group or others. Whoever can write one of them
// can put a program first in the runtime's PATH, or swap a directory on the way for one of
// their own, and every application on the runtime runs it. Directories no layer lists (the
// extractor creates them root-owned, 0755) and the layer root (the extractor's own) pass.
func checkPathOwners(root *Root, rel string) error {
	var err error
	root.view.ResolveVisit(rel, func(dir string) {
		if err != nil {
			return
		}
		e, ok := root.view.Lookup(dir)
		if !ok || e.Type != artifact.TypeDir {
			return
		}
		err = judgePathDir(e)
	})
	return err
}

// judgePathDir is the rule for one directory on the way to a PATH entry.
func judgePathDir(e artifact.Entry) error {
	switch {
	case e.UID != 0:
		return fmt.Errorf("directory /%s is owned by uid %d, which can add programs to the runtime's PATH; rebuild the image with it owned by root (chown 0:0 /%s)", e.Path, e.UID, e.Path)
	case e.Mode.Perm()&0o022 != 0:
		return fmt.Errorf("directory /%s has mode %04o, writable by group or others, who can add programs to the runtime's PATH; rebuild the image with chmod go-w /%s", e.Path, e.Mode.Perm(), e.Path)
	}
	return nil
}

func hasDotComponent(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if c == "." || c == ".." {
			return true
		}
	}
	return false
}

func checkAccounts(root *Root, user User, res *Result) error {
	passwd, hasP := root.files[passwdPath]
	group, hasG := root.files[groupPath]
	if !hasP && !hasG {
		return nil // distroless: the numeric user runs without account files
	}
	if hasP != hasG {
		return vocab.Errorf(vocab.ReasonInvalidAccountFiles, "the image has /etc/passwd or /etc/group but not both; ship both (defining uid %d and gid %d) or neither", user.UID, user.GID)
	}
	var found bool
	for _, f := range accountLines(passwd) {
		if len(f) < 7 {
			continue
		}
		uid, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || uid != user.UID {
			continue
		}
		gid, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil || gid != user.GID {
			return vocab.Errorf(vocab.ReasonInvalidAccountFiles, "/etc/passwd gives uid %d (%s) primary group %s, but spec.user.gid is %d; make them agree", user.UID, f[0], f[3], user.GID)
		}
		found, res.UserName, res.Home = true, f[0], f[5]
		break
	}
	if !found {
		return vocab.Errorf(vocab.ReasonInvalidAccountFiles, "/etc/passwd defines no user with uid %d (spec.user.uid); add one, e.g. app:x:%d:%d::/home/app:/usr/sbin/nologin", user.UID, user.UID, user.GID)
	}
	for _, f := range accountLines(group) {
		if len(f) >= 3 {
			if gid, err := strconv.ParseInt(f[2], 10, 64); err == nil && gid == user.GID {
				return nil
			}
		}
	}
	return vocab.Errorf(vocab.ReasonInvalidAccountFiles, "/etc/group defines no group with gid %d (spec.user.gid); add one", user.GID)
}

func accountLines(b []byte) [][]string {
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), maxAccountFile)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, strings.Split(l, ":"))
	}
	return out
}
