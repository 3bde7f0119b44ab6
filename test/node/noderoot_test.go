package node

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/test/framework"
)

// The harness's nodes run in a mount namespace of their own whose root has the propagation
// the tier chose (BREWLET_NODE_ROOT), whatever the machine's root is: a step that needs a
// shared root (the chart's default HostToContainer mount of the node's "/") works in the
// shared tier and fails with containerd's own message in the private one, so neither kind
// of developer machine hides it. Nothing mounted here reaches the machine's namespace.
func TestNodeMountNamespace(t *testing.T) {
	framework.RequireRoot(t)
	framework.Tool(t, "containerd")
	self, _ := os.Readlink("/proc/self/ns/mnt")
	machine, _ := os.Readlink("/proc/1/ns/mnt")
	if self == "" || self == machine {
		t.Fatalf("tests run in the machine's mount namespace (%q): the harness must give them their own", self)
	}
	want := framework.NodeRoot()
	if got := rootPropagation(t); got != want {
		t.Fatalf("root propagation here is %s, want %s (%s)", got, want, framework.NodeRootEnv)
	}
	// A mount made here stays here.
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if b, err := os.ReadFile("/proc/1/mountinfo"); err != nil || strings.Contains(string(b), " "+dir+" ") {
		t.Fatalf("a mount of the test's namespace reached the machine's (%v)", err)
	}

	n := framework.StartNode(t)
	ctx := context.Background()
	pod := n.PodConfig("host-root", nil)
	podID, err := n.RunPod(ctx, pod, "runc")
	if err != nil {
		t.Fatal(err)
	}
	c := framework.ContainerConfig("c", n.BusyboxImage, "sleep", "60")
	c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/host", HostPath: "/", Readonly: true,
		Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER}}
	_, err = n.CreateStart(ctx, podID, pod, c)
	switch want {
	case "shared":
		if err != nil {
			t.Fatalf("a HostToContainer mount of / on a node whose root is shared: %v", err)
		}
	default:
		if err == nil || !strings.Contains(err.Error(), "not a shared or slave mount") {
			t.Fatalf("a HostToContainer mount of / on a node whose root is private: want containerd's refusal, got %v", err)
		}
		c.Metadata.Name = "c-none"
		c.Mounts[0].Propagation = runtimeapi.MountPropagation_PROPAGATION_PRIVATE
		if _, err := n.CreateStart(ctx, podID, pod, c); err != nil {
			t.Fatalf("propagation None (the value for such nodes): %v", err)
		}
	}
}

// rootPropagation is the propagation of "/" in this mount namespace: "shared", "slave" or
// "private" (the last mount on "/" is the visible one).
func rootPropagation(t *testing.T) string {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter("/"))
	if err != nil || len(mounts) == 0 {
		t.Fatalf("no mount on / (%v)", err)
	}
	prop := "private"
	for _, opt := range strings.Fields(mounts[len(mounts)-1].Optional) {
		switch {
		case strings.HasPrefix(opt, "shared:"):
			return "shared"
		case strings.HasPrefix(opt, "master:"):
			prop = "slave"
		}
	}
	return prop
}
