package install

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/testutil"
	"brewlet.sh/brewlet/internal/vocab"
)

func requireRoot(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t, "extraction sets owners, devices and trusted.* xattrs")
}

type hdr = tar.Header

func tarOf(t testing.TB, hs ...hdr) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		h := h
		body := []byte{}
		if h.Typeflag == tar.TypeReg {
			body = []byte("content of " + h.Name)
			h.Size = int64(len(body))
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write(body)
	}
	_ = tw.Close()
	return buf.Bytes()
}

func TestExtractOverlayFormat(t *testing.T) {
	requireRoot(t)
	dst := filepath.Join(t.TempDir(), "layer")
	err := Extract(bytes.NewReader(tarOf(t,
		hdr{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		hdr{Name: "usr/bin/python3", Typeflag: tar.TypeReg, Mode: 0o755},
		hdr{Name: "home/app/", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 10001, Gid: 10001},
		hdr{Name: "bin", Typeflag: tar.TypeSymlink, Linkname: "usr/bin"},
		hdr{Name: "usr/bin/python", Typeflag: tar.TypeLink, Linkname: "usr/bin/python3"},
		hdr{Name: "etc/.wh.motd", Typeflag: tar.TypeReg, Mode: 0o644},
		hdr{Name: "var/cache/.wh..wh..opq", Typeflag: tar.TypeReg, Mode: 0o644},
		hdr{Name: "dev/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666},
	)), dst)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(dst, "home/app"))
	if err != nil || fi.Mode().Perm() != 0o750 || fi.Sys().(*syscall.Stat_t).Uid != 10001 {
		t.Fatalf("home/app: %v %v", err, fi)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "bin")); l != "usr/bin" {
		t.Fatalf("bin symlink %q", l)
	}
	a, _ := os.Stat(filepath.Join(dst, "usr/bin/python"))
	b, _ := os.Stat(filepath.Join(dst, "usr/bin/python3"))
	if !os.SameFile(a, b) {
		t.Fatal("hard link not preserved")
	}
	wo, err := os.Lstat(filepath.Join(dst, "etc/motd"))
	if err != nil || wo.Mode()&os.ModeCharDevice == 0 || wo.Sys().(*syscall.Stat_t).Rdev != 0 {
		t.Fatalf("whiteout not a 0/0 char device: %v %v", err, wo)
	}
	buf := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(dst, "var/cache"), opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		t.Fatalf("opaque marker: %v %q", err, buf[:n])
	}
	if _, err := os.Lstat(filepath.Join(dst, "dev/null")); err == nil {
		t.Fatal("device node created")
	}
}

func TestExtractRefusesEscapes(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name string
		tar  []hdr
	}{
		{"write through a symlinked parent", []hdr{
			{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: "VICTIM"},
			{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"absolute path", []hdr{{Name: "/etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"dotdot", []hdr{{Name: "a/../../passwd", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"hard link outside", []hdr{{Name: "x", Typeflag: tar.TypeLink, Linkname: "../VICTIM/secret"}}},
		{"hard link through symlink", []hdr{
			{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "VICTIM"},
			{Name: "x", Typeflag: tar.TypeLink, Linkname: "l/secret"}}},
		// The finding: a whiteout whose name strips to ".." replaced the extractor's own
		// workspace (the layer's parent) with a device node.
		{"whiteout of the layer's parent", []hdr{{Name: ".wh...", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"whiteout of the layer's parent, dotted", []hdr{{Name: "./.wh...", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"whiteout of the layer root", []hdr{{Name: ".wh..", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"whiteout of the root from a directory", []hdr{{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "a/.wh...", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"whiteout of a parent from below it", []hdr{{Name: "a/b/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "a/b/.wh...", Typeflag: tar.TypeChar, Mode: 0o644}}},
		{"whiteout without a name", []hdr{{Name: "a/.wh.", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"opaque marker used as a directory", []hdr{{Name: ".wh..wh..opq/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: ".wh..wh..opq/x", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"whiteout name used as a directory", []hdr{{Name: ".wh.../x", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"file naming the layer root", []hdr{{Name: ".", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"symlink naming the layer root", []hdr{{Name: ".", Typeflag: tar.TypeSymlink, Linkname: "VICTIM"}}},
		{"hard link to the layer root", []hdr{{Name: "x", Typeflag: tar.TypeLink, Linkname: "./"}}},
		{"hard link to nothing", []hdr{{Name: "x", Typeflag: tar.TypeLink, Linkname: ""}}},
		{"hard link to the layer's parent", []hdr{{Name: "x", Typeflag: tar.TypeLink, Linkname: "a/../.."}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sandbox := t.TempDir()
			victim := filepath.Join(sandbox, "victim")
			if err := os.MkdirAll(victim, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(victim, "secret"), []byte("s"), 0o600); err != nil {
				t.Fatal(err)
			}
			hs := append([]hdr{}, tc.tar...)
			for i := range hs {
				if hs[i].Linkname == "VICTIM" {
					hs[i].Linkname = victim
				}
				if hs[i].Linkname == "../VICTIM/secret" {
					hs[i].Linkname = "../victim/secret"
				}
			}
			err := Extract(bytes.NewReader(tarOf(t, hs...)), filepath.Join(sandbox, "layer"))
			if vocab.ReasonOf(err) != vocab.ReasonLayerPathViolation {
				t.Fatalf("got %v, want LayerPathViolation", err)
			}
			ents, _ := os.ReadDir(victim)
			if len(ents) != 1 {
				t.Fatalf("victim directory changed: %v", ents)
			}
			sandboxUntouched(t, sandbox, "victim")
		})
	}
}

func FuzzExtract(f *testing.F) {
	f.Add(tarOf(f, hdr{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755}, hdr{Name: "a/b", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(tarOf(f, hdr{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"}, hdr{Name: "l/x", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(tarOf(f, hdr{Name: "x", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}))
	f.Add(tarOf(f, hdr{Name: ".wh..wh..opq", Typeflag: tar.TypeReg}, hdr{Name: "d/.wh.e", Typeflag: tar.TypeReg}))
	f.Add(tarOf(f, hdr{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: map[string]string{"SCHILY.xattr.trusted.overlay.opaque": "x"}}))
	f.Add(tarOf(f, hdr{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, PAXRecords: map[string]string{"SCHILY.xattr.user.overlay.redirect": "/x"}}))
	f.Add(tarOf(f, hdr{Name: ".wh...", Typeflag: tar.TypeReg}))
	f.Add(tarOf(f, hdr{Name: "a/b/", Typeflag: tar.TypeDir, Mode: 0o755}, hdr{Name: "a/b/.wh...", Typeflag: tar.TypeReg}, hdr{Name: "a/.wh..", Typeflag: tar.TypeReg}))
	f.Add(tarOf(f, hdr{Name: ".", Typeflag: tar.TypeReg}, hdr{Name: "x", Typeflag: tar.TypeLink, Linkname: "./"}))
	// Entries that replace or reach through earlier ones, which the background writers must
	// not reorder (extractwriters.go).
	f.Add(tarOf(f, hdr{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644}, hdr{Name: "a/b", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(tarOf(f, hdr{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644}, hdr{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755}, hdr{Name: "a/b", Typeflag: tar.TypeReg, Mode: 0o600}))
	f.Add(tarOf(f, hdr{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644}, hdr{Name: "d", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, hdr{Name: "d/g", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(tarOf(f, hdr{Name: "f", Typeflag: tar.TypeReg, Mode: 0o4755}, hdr{Name: "h", Typeflag: tar.TypeLink, Linkname: "f"}, hdr{Name: "f", Typeflag: tar.TypeReg, Mode: 0o600}))
	f.Add(tarOf(f, hdr{Name: "d/e/f", Typeflag: tar.TypeReg, Mode: 0o644}, hdr{Name: "d/.wh.e", Typeflag: tar.TypeReg}, hdr{Name: "d/e", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(tarOf(f, hdr{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644}, hdr{Name: "d/.wh..wh..opq", Typeflag: tar.TypeReg}, hdr{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o700, Uid: 7}))
	f.Fuzz(func(t *testing.T, b []byte) {
		requireRoot(t)
		sandbox := t.TempDir()
		if err := os.WriteFile(filepath.Join(sandbox, "sentinel"), []byte("s"), 0o600); err != nil {
			t.Fatal(err)
		}
		err := Extract(bytes.NewReader(b), filepath.Join(sandbox, "layer"))
		// Whatever the input, no overlay attribute the extractor did not set survives.
		if err == nil {
			_ = filepath.WalkDir(filepath.Join(sandbox, "layer"), func(p string, d os.DirEntry, _ error) error {
				buf := make([]byte, 4096)
				n, _ := unix.Llistxattr(p, buf)
				for _, name := range strings.Split(string(buf[:max(n, 0)]), "\x00") {
					if artifact.IsOverlayXattr(name) && name != opaqueXattr {
						t.Fatalf("%s carries %s", p, name)
					}
				}
				return nil
			})
		}
		// Whatever the input, nothing beside the layer directory changes.
		sandboxUntouched(t, sandbox, "sentinel")
		// Background writers change nothing: extracting strictly in order gives the same
		// tree, or refuses too.
		_, inOrder := extract(bytes.NewReader(b), filepath.Join(sandbox, "in-order"), -1, false)
		if (err == nil) != (inOrder == nil) {
			t.Fatalf("queued: %v; in order: %v", err, inOrder)
		}
		if err == nil {
			if a, b := describeTree(t, filepath.Join(sandbox, "layer")), describeTree(t, filepath.Join(sandbox, "in-order")); !slices.Equal(a, b) {
				t.Fatalf("queued and in-order extractions differ:\n%s\n---\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
			}
		}
	})
}

// describeTree lists every entry below root with its type, mode, owner, content hash or
// link target, extended attributes and which entries share an inode.
func describeTree(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("%s mode=%o uid=%d gid=%d rdev=%d", rel, st.Mode, st.Uid, st.Gid, st.Rdev)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
			if first, ok := inodes[st.Ino]; ok {
				desc += " same-inode-as=" + first
			} else {
				inodes[st.Ino] = rel
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		buf := make([]byte, 4096)
		n, _ := unix.Llistxattr(p, buf)
		names := strings.Split(string(buf[:max(n, 0)]), "\x00")
		slices.Sort(names)
		for _, name := range names {
			if name == "" {
				continue
			}
			v := make([]byte, 4096)
			vn, _ := unix.Lgetxattr(p, name, v)
			desc += fmt.Sprintf(" %s=%q", name, v[:max(vn, 0)])
		}
		out = append(out, desc)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sandboxUntouched fails unless sandbox is still a directory holding only keep (unchanged
// since the test made it) and, if anything, the layer directory itself.
func sandboxUntouched(t testing.TB, sandbox, keep string) {
	t.Helper()
	if fi, err := os.Lstat(sandbox); err != nil || !fi.IsDir() {
		t.Fatalf("the layer's parent %s was replaced: %v %v", sandbox, fi, err)
	}
	ents, err := os.ReadDir(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, e := range ents {
		switch e.Name() {
		case keep:
			seen = true
		case "layer":
			if !e.IsDir() {
				t.Fatalf("the layer directory became a %v", e.Type())
			}
		default:
			t.Fatalf("extraction wrote %s outside its directory", e.Name())
		}
	}
	if !seen {
		t.Fatalf("extraction removed %s beside the layer", keep)
	}
}

// Overlay's attributes are the extractor's alone: any trusted.overlay.* or user.overlay.*
// attribute in the archive refuses the layer, whatever its value or entry type, so a layer
// can never hide lower entries from validation (an opaque marker of an odd value, a
// redirect) or plant a whiteout the validator does not see. The .wh..wh..opq marker stays
// the one way to make a directory opaque.
func TestExtractRefusesOverlayXattrs(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		x string // name=value
		h hdr
	}{
		{"trusted.overlay.opaque=y", hdr{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{"trusted.overlay.opaque=x", hdr{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{"user.overlay.opaque=y", hdr{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{"trusted.overlay.redirect=/elsewhere", hdr{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{"trusted.overlay.whiteout=", hdr{Name: "etc/shadow", Typeflag: tar.TypeReg, Mode: 0o644}},
		{"trusted.overlay.metacopy=", hdr{Name: "bin/sh", Typeflag: tar.TypeReg, Mode: 0o755}},
		{"user.overlay.origin=abc", hdr{Name: "lib", Typeflag: tar.TypeSymlink, Linkname: "usr/lib"}},
	} {
		t.Run(tc.x, func(t *testing.T) {
			x := tc.x
			k, v, _ := strings.Cut(x, "=")
			h := tc.h
			h.PAXRecords = map[string]string{"SCHILY.xattr." + k: v}
			dst := filepath.Join(t.TempDir(), "layer")
			err := Extract(bytes.NewReader(tarOf(t, hdr{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, h)), dst)
			if vocab.ReasonOf(err) != vocab.ReasonLayerPathViolation || !strings.Contains(err.Error(), k) {
				t.Fatalf("%s: got %v, want LayerPathViolation naming the attribute", x, err)
			}
		})
	}
	// Other attributes pass through; the opaque marker file still makes a directory opaque.
	dst := filepath.Join(t.TempDir(), "layer")
	err := Extract(bytes.NewReader(tarOf(t,
		hdr{Name: "data", Typeflag: tar.TypeReg, Mode: 0o644, PAXRecords: map[string]string{"SCHILY.xattr.user.comment": "kept",
			"SCHILY.xattr.security.selinux": "system_u:object_r:shadow_t:s0"}},
		hdr{Name: "var/cache/.wh..wh..opq", Typeflag: tar.TypeReg, Mode: 0o644},
	)), dst)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(dst, "data"), "user.comment", buf); err != nil || string(buf[:n]) != "kept" {
		t.Fatalf("user.comment: %v %q", err, buf[:n])
	}
	if n, err := unix.Lgetxattr(filepath.Join(dst, "var/cache"), opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		t.Fatalf("opaque marker: %v %q", err, buf[:n])
	}
	// The image's own SELinux label is never applied: labels are the node's.
	if l, err := artifact.ReadLabel(filepath.Join(dst, "data")); err != nil || l != "" {
		t.Fatalf("security.selinux applied from the archive: %q %v", l, err)
	}
}

// The entry cap counts every tar entry, refused with LimitExceeded naming the cap.
func TestExtractEntryLimit(t *testing.T) {
	requireRoot(t)
	tb := tarOf(t, hdr{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755}, hdr{Name: "a/b", Typeflag: tar.TypeReg, Mode: 0o644},
		hdr{Name: "a/.wh.c", Typeflag: tar.TypeReg}, hdr{Name: "d", Typeflag: tar.TypeSymlink, Linkname: "a"})
	_, err := ExtractLimited(bytes.NewReader(tb), filepath.Join(t.TempDir(), "layer"), 3)
	if vocab.ReasonOf(err) != vocab.ReasonLimitExceeded || !strings.Contains(err.Error(), "more than 3 entries") {
		t.Fatalf("4 entries, cap 3: %v", err)
	}
	if n, err := ExtractLimited(bytes.NewReader(tb), filepath.Join(t.TempDir(), "layer"), 4); err != nil || n != 4 {
		t.Fatalf("4 entries, cap 4: %d %v", n, err)
	}
	if _, err = ExtractLimited(bytes.NewReader(tb), filepath.Join(t.TempDir(), "layer"), 0); vocab.ReasonOf(err) != vocab.ReasonLimitExceeded {
		t.Fatalf("cap 0 (budget used up by earlier layers): %v", err)
	}
}
