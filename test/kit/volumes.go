package kit

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"brewlet.sh/brewlet/test/framework"
)

// MountNodeVolumes mounts, below dir (the node's /var/lib), what a node's kubelet and CSI
// drivers leave there: a tmpfs, a loop-mounted ext4 and a ramfs, which cannot be idmapped
// (like NFS). It returns their mount points, the ramfs first; each is unmounted at the end.
func MountNodeVolumes(t *testing.T, dir string) []string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "volume.img")
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(16 << 20)
		_ = f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		framework.Unavailable(t, "mkfs.ext4 (Debian package e2fsprogs): %v", err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", img).CombinedOutput(); err != nil {
		framework.Unavailable(t, "mkfs.ext4 (e2fsprogs): %v: %s", err, out)
	}
	var points []string
	for _, v := range []struct{ name, fstype, source, opts string }{
		{"ramfs", "ramfs", "ramfs", ""},
		{"kubelet-tmpfs", "tmpfs", "tmpfs", "size=1m"},
		{"csi-ext4", "ext4", img, "loop"},
	} {
		p := filepath.Join(dir, v.name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		args := []string{"-t", v.fstype, v.source, p}
		if v.opts != "" {
			args = append([]string{"-o", v.opts}, args...)
		}
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			framework.Unavailable(t, "mount a %s under the node's /var/lib: %v: %s", v.fstype, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", p).Run() })
		points = append(points, p)
	}
	return points
}
