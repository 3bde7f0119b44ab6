package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/test/framework"
)

// A pod and a busybox container run through CRI on the test node with the stock runc
// handler, and exec works; the brewlet handler's shim (built from this repository) runs pod
// sandboxes and refuses a plain image with a typed reason.
func TestNodeRunsPodsThroughCRI(t *testing.T) {
	n := framework.StartNode(t)
	ctx := context.Background()
	t.Run("brewlet", func(t *testing.T) {
		pod := n.PodConfig("bb-brewlet", nil)
		podID, err := n.RunPod(ctx, pod, "brewlet")
		if err != nil {
			t.Fatalf("RunPodSandbox with handler brewlet: %v", err)
		}
		out, err := n.Crictl(t, "inspectp", podID)
		if err != nil || !strings.Contains(out, `"runtimeHandler": "brewlet"`) {
			t.Fatalf("pod does not run under handler brewlet: %v\n%s", err, out)
		}
		_, err = n.CreateStart(ctx, podID, pod, framework.ContainerConfig("bb", n.BusyboxImage, "sleep", "60"))
		if err == nil || !strings.Contains(err.Error(), "RuntimeImageRequired: ") {
			t.Fatalf("plain container under brewlet: %v", err)
		}
	})
	for _, handler := range []string{"runc"} {
		t.Run(handler, func(t *testing.T) {
			pod := n.PodConfig("bb-"+handler, nil)
			podID, err := n.RunPod(ctx, pod, handler)
			if err != nil {
				t.Fatalf("RunPodSandbox with handler %s: %v", handler, err)
			}
			c := framework.ContainerConfig("bb", n.BusyboxImage, "sh", "-c", "echo started; while true; do sleep 5; done")
			c.Envs = []*runtimeapi.KeyValue{{Key: "FROM_CRI", Value: []byte("yes")}}
			cid, err := n.CreateStart(ctx, podID, pod, c)
			if err != nil {
				t.Fatalf("create/start container: %v", err)
			}
			out, _, code, err := n.ExecSync(ctx, cid, "sh", "-c", "echo exec-ok FROM_CRI=$FROM_CRI; id -u")
			if err != nil || code != 0 || !strings.Contains(out, "exec-ok FROM_CRI=yes") {
				t.Fatalf("ExecSync: err=%v code=%d out=%q", err, code, out)
			}
			// crictl's exec goes through the CRI streaming server.
			out, err = n.Crictl(t, "exec", cid, "cat", "/proc/1/cmdline")
			if err != nil {
				t.Fatalf("crictl exec: %v\n%s", err, out)
			}
			if !strings.Contains(out, "pause") {
				t.Fatalf("exec did not see the pod's pause process as PID 1: %q", out)
			}
			out, err = n.Crictl(t, "inspectp", podID)
			if err != nil || !strings.Contains(out, `"runtimeHandler": "`+handler+`"`) {
				t.Fatalf("pod does not run under handler %s: %v\n%s", handler, err, out)
			}
			// The container lives under the node's private cgroup parent.
			st, err := n.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cid})
			if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				t.Fatalf("container status: %v %v", err, st)
			}
			matches, _ := filepath.Glob("/sys/fs/cgroup/memory/" + n.CgroupParent + "/pod" + pod.Metadata.Uid + "/*")
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil && len(matches) == 0 {
				t.Fatalf("no cgroup under /sys/fs/cgroup/memory/%s for the pod", n.CgroupParent)
			}
		})
	}
	// An unknown handler is refused by containerd, not silently replaced.
	if _, err := n.RunPod(ctx, n.PodConfig("nosuch", nil), "nosuch"); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("unknown handler accepted or unclear error: %v", err)
	}
}

// Cleanup leaves no process, mount, bridge, cgroup or file behind, even with running pods.
func TestNodeCleanupLeavesNothing(t *testing.T) {
	n := framework.StartNode(t)
	ctx := context.Background()
	if _, err := n.RunPod(ctx, n.PodConfig("brewlet-sandbox", nil), "brewlet"); err != nil {
		t.Fatal(err)
	}
	pod := n.PodConfig("leftover", nil)
	podID, err := n.RunPod(ctx, pod, "runc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateStart(ctx, podID, pod, framework.ContainerConfig("c", n.BusyboxImage, "sleep", "3600")); err != nil {
		t.Fatal(err)
	}
	dir, bridge, cg := n.Dir, n.Bridge, n.CgroupParent
	if err := n.Cleanup(); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("instance dir %s still exists (%v)", dir, err)
	}
	if _, err := os.Stat("/sys/class/net/" + bridge); !os.IsNotExist(err) {
		t.Errorf("bridge %s still exists", bridge)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/" + cg); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), dir) {
		t.Errorf("mounts under %s left", dir)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), dir) {
			t.Errorf("process %s still references %s: %q", p, dir, b)
		}
	}
}
