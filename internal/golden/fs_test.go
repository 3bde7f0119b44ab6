package golden

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// The composed root read as a file system shows what overlayfs would: the upper layer's
// whiteout hides a lower file, an opaque directory hides the lower directory's content,
// links are reported, not followed, and directories no layer lists still list their files.
func TestRootFS(t *testing.T) {
	base := t.TempDir()
	lower, upper := filepath.Join(base, "a"), filepath.Join(base, "b")
	write := func(p, body string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(lower, "usr/bin/sh"), "sh", 0o755)
	write(filepath.Join(lower, "usr/bin/tool"), "tool", 0o755)
	write(filepath.Join(lower, "opt/old/file"), "old", 0o644)
	write(filepath.Join(upper, "usr/bin/new"), "new", 0o755)
	write(filepath.Join(upper, "opt/old/kept"), "kept", 0o644)
	if err := os.Symlink("usr/bin", filepath.Join(lower, "bin")); err != nil {
		t.Fatal(err)
	}
	// The whiteout of /usr/bin/tool, and /opt/old opaque, in overlay format.
	if err := unix.Mknod(filepath.Join(upper, "usr/bin/tool"), unix.S_IFCHR, 0); err != nil {
		t.Fatalf("mknod a whiteout (the unit tests run as root, as make test does): %v", err)
	}
	if err := unix.Lsetxattr(filepath.Join(upper, "opt/old"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	root, err := IndexDirLayersContext(context.Background(), []string{lower, upper})
	if err != nil {
		t.Fatal(err)
	}
	fsys := root.FS()
	entries, err := fs.ReadDir(fsys, "usr/bin")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"new", "sh"}) {
		t.Errorf("usr/bin lists %v, want new and sh (tool whited out)", names)
	}
	if b, err := fs.ReadFile(fsys, "usr/bin/new"); err != nil || string(b) != "new" {
		t.Errorf("usr/bin/new: %q %v", b, err)
	}
	if _, err := fs.Stat(fsys, "opt/old/file"); err == nil {
		t.Error("a file behind an opaque directory shows")
	}
	if target, err := fs.ReadLink(fsys, "bin"); err != nil || target != "usr/bin" {
		t.Errorf("bin: %q %v", target, err)
	}
	if fi, err := fs.Lstat(fsys, "bin"); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("bin is %v (%v), want a link", fi, err)
	}
	if fi, err := fs.Stat(fsys, "usr"); err != nil || !fi.IsDir() {
		t.Errorf("usr: %v %v", fi, err)
	}
	if fi, err := fs.Stat(fsys, "usr/bin/sh"); err != nil || fi.Size() != 2 || fi.Mode().Perm() != 0o755 {
		t.Errorf("usr/bin/sh: %v %v", fi, err)
	}
	for _, bad := range []string{"../a", "/usr", "usr/bin/tool"} {
		if _, err := fsys.Open(bad); err == nil {
			t.Errorf("%s opened", bad)
		}
	}
	if (&Root{}).FS() != nil {
		t.Error("a root without extracted layers has a file system")
	}
}
