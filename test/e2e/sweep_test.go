package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"brewlet.sh/brewlet/test/framework"
)

const helperEnv = "BREWLET_E2E_HELPER_HANG"

// A test binary killed with SIGKILL (a CI timeout) cannot run its cleanups; the next run's
// sweep must still remove everything it left: shims, containers, mounts, bridge, cgroups.
func TestSweepRemovesWhatAKilledTestLeft(t *testing.T) {
	framework.RequireRoot(t)
	framework.Tool(t, "containerd")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperNodeThenHang$", "-test.v", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir, bridge, cgroup string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "HELPER-READY" {
			dir, bridge, cgroup = f[1], f[2], f[3]
			break
		}
	}
	if dir == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("helper never reported a running node")
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()

	// The shim outlives its test binary by design; that is what the sweep is for.
	if !processReferences(dir) {
		t.Log("note: no process referenced the instance after the kill")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		errs := framework.Sweep()
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sweep did not remove %s: %v", dir, errs)
		}
		time.Sleep(time.Second)
	}
	if processReferences(dir) {
		t.Errorf("a process still references %s after the sweep", dir)
	}
	if _, err := os.Stat("/sys/class/net/" + bridge); !os.IsNotExist(err) {
		t.Errorf("bridge %s left", bridge)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroup); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), dir) {
		t.Errorf("mounts left under %s", dir)
	}
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

func processReferences(dir string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), dir+"/") {
			return true
		}
	}
	return false
}
