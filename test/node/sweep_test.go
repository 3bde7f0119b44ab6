package node

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

const helperEnv = "BREWLET_E2E_HELPER_HANG"

// A test binary killed with SIGKILL (a CI timeout) cannot run its cleanups; the next run's
// sweep must still remove everything it left: shims, containers, mounts, bridge, cgroups.
func TestSweepRemovesWhatAKilledTestLeft(t *testing.T) {
	framework.RequireRoot(t)
	framework.Tool(t, "containerd")
	f, kill := kit.StartHelper(t, "TestHelperNodeThenHang", helperEnv, 3)
	dir, bridge, cgroup := f[0], f[1], f[2]
	kill()
	// The shim outlives its test binary by design; that is what the sweep is for.
	if !kit.ProcessReferences(dir) {
		t.Log("note: no process referenced the instance after the kill")
	}
	kit.SweepLeavesNothing(t, 30*time.Second, bridge, cgroup, dir)
}

// TestHelperNodeThenHang runs only as the child of the test above.
func TestHelperNodeThenHang(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("helper process for TestSweepRemovesWhatAKilledTestLeft")
	}
	n := framework.StartNode(t)
	ctx := context.Background()
	if _, err := n.RunPod(ctx, n.PodConfig("orphan-sandbox", nil), "brewlet"); err != nil {
		t.Fatal(err)
	}
	pod := n.PodConfig("orphan", nil)
	podID, err := n.RunPod(ctx, pod, "runc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateStart(ctx, podID, pod, framework.ContainerConfig("c", n.BusyboxImage, "sleep", "3600")); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("HELPER-READY %s %s %s\n", n.Dir, n.Bridge, n.CgroupParent)
	time.Sleep(10 * time.Minute)
}
