package gc

import (
	"strings"
	"testing"
)

func TestMountedNames(t *testing.T) {
	a := strings.Repeat("a", 64)
	b := strings.Repeat("b", 64)
	for _, tc := range []struct {
		name, line string
		want       []string
	}{
		{"absolute lowerdirs",
			"120 30 0:61 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/c1/rootfs rw,relatime - overlay overlay rw,lowerdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/12/fs:/var/lib/brewlet/masks/hide-app:/var/lib/brewlet/layers/" + b + ":/var/lib/brewlet/layers/" + a + ",upperdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/13/fs,workdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/13/work",
			[]string{a, b}},
		// containerd changed into the common parent (/var/lib) of a long option string.
		{"compacted relative lowerdirs",
			"121 30 0:62 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/c2/rootfs rw,relatime - overlay overlay rw,lowerdir=containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/12/fs:brewlet/masks/hide-app:brewlet/layers/" + a + ",upperdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/14/fs,workdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/14/work",
			[]string{a}},
		// Compacted down to the layers directory itself: only the name is left.
		{"compacted to bare names",
			"122 30 0:63 / /x rw - overlay overlay rw,lowerdir=" + a + ":" + b + ",upperdir=/u,workdir=/w",
			[]string{a, b}},
		{"idmapped lowerdirs through a temporary mount",
			"123 30 0:64 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/c3/rootfs rw,relatime - overlay overlay rw,lowerdir=/tmp/ovl-idmapped2871/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/12/fs:/tmp/ovl-idmapped2871/brewlet/layers/" + b + ",upperdir=/u,workdir=/w,uuid=on",
			[]string{b}},
		{"one layer at a time (lowerdir+)",
			"124 30 0:65 / /r rw - overlay overlay rw,lowerdir+=/var/lib/brewlet/layers/" + a + ",datadir+=/d,upperdir=/u,workdir=/w",
			[]string{a}},
		{"bind mount of a layer, root relative to its filesystem",
			"125 30 259:2 /lib/brewlet/layers/" + a + " /mnt/l ro,relatime - ext4 /dev/nvme0n1p2 rw",
			[]string{a}},
		{"escaped blank glued to a name",
			`126 30 0:66 / /mnt/my\040dir/` + a + ` rw - tmpfs tmpfs rw`,
			[]string{a}},
		{"snapshot IDs and short hex are not layers",
			"127 30 0:67 / /r rw - overlay overlay rw,lowerdir=/var/lib/containerd/snapshots/123456/fs:/x/abcdef,upperdir=/u,workdir=/w",
			nil},
		{"upper case is not a diff ID", "128 30 0:68 / /r rw - overlay overlay rw,lowerdir=/l/" + strings.ToUpper(a), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mountedNames("36 35 98:0 / / rw - ext4 /dev/root rw\n" + tc.line + "\n")
			if len(got) != len(tc.want) {
				t.Fatalf("names %v, want %v", got, tc.want)
			}
			for _, w := range tc.want {
				if !got[w] {
					t.Fatalf("names %v, want %v", got, tc.want)
				}
			}
		})
	}
}
