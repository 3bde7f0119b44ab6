package node

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/kit"
)

// SELinux nodes label every file containerd unpacks with the label their policy gives
// containerd's snapshots. This machine loads no policy, but the kernel still stores
// security.selinux for root, so the node is made to look like one: its snapshots directory
// gets that label, and the application layers bring it on every file (containerd applies an
// archive's attributes as they are, which is also how a hostile image brings its own). The
// shim accepts the node's label and only it; a verdict given before the node had a label is
// not reused after.
func TestDataPathSELinuxLabels(t *testing.T) {
	const node = "system_u:object_r:container_ro_file_t:s0"
	d := newDataPath(t)
	snapshots := filepath.Join(d.N.Dir, "root", "io.containerd.snapshotter.v1.overlayfs", "snapshots")
	if _, err := os.Stat(snapshots); err != nil {
		t.Fatalf("containerd's snapshots directory: %v", err)
	}
	labelled := func(label, mainLabel string) []byte {
		x := func(l string) map[string]string { return map[string]string{artifact.SELinuxXattr: l} }
		return paxLayer(t, paxEntry{name: "app/", typ: tar.TypeDir, mode: 0o755, xattrs: x(label)},
			paxEntry{name: "app/main.py", typ: tar.TypeReg, mode: 0o644, xattrs: x(mainLabel)})
	}
	listApp := func(c *runtimeapi.ContainerConfig) {
		c.Command = []string{"python", "-c", "import os; print('app', sorted(os.listdir('/app')))"}
	}
	nodeLabelled := pushRawApp(t, d.N.Registry+"/apps/selinux:node", labelled(node, node))
	ownLabel := pushRawApp(t, d.N.Registry+"/apps/selinux:own", labelled(node, "system_u:object_r:shadow_t:s0"))
	refused := func(ref, label string) {
		t.Helper()
		_, _, err := d.Start(t, nil, func(c *runtimeapi.ContainerConfig) { c.Image.Image = ref; listApp(c) })
		kit.ExpectReason(t, err, vocab.ReasonLayerPathViolation)
		if !strings.Contains(err.Error(), fmt.Sprintf("SELinux label %q", label)) {
			t.Fatalf("the refusal should name the layer's label %s: %v", label, err)
		}
	}

	// A node without labels: any label is the layer's own.
	refused(nodeLabelled, node)

	if err := unix.Lsetxattr(snapshots, artifact.SELinuxXattr, []byte(node+"\x00"), 0); err != nil {
		t.Fatal(err)
	}
	cid, pod, err := d.Start(t, nil, func(c *runtimeapi.ContainerConfig) { c.Image.Image = nodeLabelled; listApp(c) })
	if err != nil {
		t.Fatalf("files carrying the node's own label refused: %v", err)
	}
	if out := d.Output(t, cid, pod); !strings.Contains(out, "app ['main.py']") {
		t.Fatalf("the application's files are not in /app: %s", out)
	}
	// One file with a label the node did not write.
	refused(ownLabel, "system_u:object_r:shadow_t:s0")
}
