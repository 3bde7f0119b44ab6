package golden

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/vocab"
)

// runtimeLayers writes two extracted runtime layers as the installer stores them: the
// lower one has a setuid /usr/bin/su, the upper one marks /usr/bin with
// trusted.overlay.opaque=value.
func runtimeLayers(t *testing.T, value string) (lower, upper string) {
	t.Helper()
	base, err := os.MkdirTemp("", "brewlet-rt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	lower, upper = filepath.Join(base, "a"), filepath.Join(base, "b")
	for _, d := range []string{filepath.Join(lower, "usr/bin"), filepath.Join(upper, "usr/bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	su := filepath.Join(lower, "usr/bin/su")
	if err := os.WriteFile(su, []byte("ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(su, 0o4755|fs.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lsetxattr(filepath.Join(upper, "usr/bin"), artifact.OpaqueXattr, []byte(value), 0); err != nil {
		t.Fatal(err)
	}
	return lower, upper
}

// kernelShows mounts the layers with overlayfs and reports whether path exists there.
func kernelShows(t *testing.T, lower, upper, path string) bool {
	t.Helper()
	mnt, err := os.MkdirTemp("", "brewlet-mnt-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Remove(mnt) }()
	if err := unix.Mount("overlay", mnt, "overlay", unix.MS_RDONLY, "lowerdir="+upper+":"+lower); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("overlay mount: %v", err)
		}
		t.Skipf("overlay mount: %v", err)
	}
	defer func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) }()
	_, err = os.Lstat(filepath.Join(mnt, path))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// TestRuntimeOpaqueAgreesWithKernel: a setuid file behind an opaque marker that is not "y"
// is shown by the kernel and refused; behind a real "y" marker the kernel hides it and the
// runtime is valid. The validator hides exactly what the kernel hides.
func TestRuntimeOpaqueAgreesWithKernel(t *testing.T) {
	needRoot(t, "overlay mounts and trusted.* xattrs need it")
	for _, tc := range []struct {
		value  string
		shown  bool
		reason vocab.Reason
	}{
		{value: "n", shown: true, reason: vocab.ReasonLayerPathViolation},
		{value: "yes", shown: true, reason: vocab.ReasonLayerPathViolation},
		{value: "y", shown: false},
	} {
		t.Run(tc.value, func(t *testing.T) {
			lower, upper := runtimeLayers(t, tc.value)
			if got := kernelShows(t, lower, upper, "usr/bin/su"); got != tc.shown {
				t.Fatalf("kernel shows usr/bin/su: %v, want %v", got, tc.shown)
			}
			root, err := IndexDirLayersContext(context.Background(), []string{lower, upper})
			if err == nil {
				_, err = Validate(root, nil, User{UID: 10001, GID: 10001})
			}
			if vocab.ReasonOf(err) != tc.reason {
				t.Fatalf("got %v, want reason %q", err, tc.reason)
			}
			if tc.reason != "" && !strings.Contains(err.Error(), artifact.OpaqueXattr) {
				t.Fatalf("message does not name the attribute: %v", err)
			}
		})
	}
}

// The node judges PATH directories on the installed tree (the extracted layers, owners and
// modes as stat shows them), where the runtime is accepted, not only on the image's tar
// headers.
func TestInstalledPathOwners(t *testing.T) {
	needRoot(t, "files owned by other users need it")
	for _, tc := range []struct {
		name   string
		change func(layer string) error
		want   string // "" = valid
	}{
		{"root 0755", func(string) error { return nil }, ""},
		{"world-writable", func(l string) error { return os.Chmod(filepath.Join(l, "usr/bin"), 0o777) }, "/usr/bin has mode 0777"},
		{"group-writable parent", func(l string) error { return os.Chmod(filepath.Join(l, "usr"), 0o775) }, "/usr has mode 0775"},
		{"owned by a user", func(l string) error { return os.Chown(filepath.Join(l, "usr/bin"), 10001, 0) }, "/usr/bin is owned by uid 10001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layer := filepath.Join(t.TempDir(), "layer")
			if err := os.MkdirAll(filepath.Join(layer, "usr/bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("usr/bin", filepath.Join(layer, "bin")); err != nil {
				t.Fatal(err)
			}
			if err := tc.change(layer); err != nil {
				t.Fatal(err)
			}
			root, err := IndexDirLayersContext(context.Background(), []string{layer})
			if err == nil {
				_, err = Validate(root, []string{"PATH=/bin"}, User{UID: 10001, GID: 10001})
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if vocab.ReasonOf(err) != vocab.ReasonInvalidRuntimePath || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want InvalidRuntimePath mentioning %q", err, tc.want)
			}
		})
	}
}

// needRoot skips a test that needs root outside CI; under CI=true a missing root fails.
func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must run as root: " + why)
		}
		t.Skip("needs root: " + why)
	}
}
