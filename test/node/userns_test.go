package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// usernsPod is the namespace options of a pod with hostUsers: false: the kubelet hands the
// CRI one range of the node's IDs for the pod's IDs 0…length-1, for the sandbox and each
// container alike.
func usernsPod(hostID, length uint32) *runtimeapi.NamespaceOption {
	m := []*runtimeapi.IDMapping{{HostId: hostID, ContainerId: 0, Length: length}}
	return &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}}
}

// startUserns starts the app in a user-namespaced brewlet pod running cmd.
func startUserns(t *testing.T, d *kit.DataPath, ns *runtimeapi.NamespaceOption, cmd ...string) (string, *runtimeapi.PodSandboxConfig, error) {
	t.Helper()
	return d.StartIn(t, nil, &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}, func(c *runtimeapi.ContainerConfig) {
		c.Linux.SecurityContext.NamespaceOptions = ns
		if len(cmd) > 0 {
			c.Command = cmd
		}
	})
}

// Brewlet pods with hostUsers: false run in their own user namespace. The runtime's and the
// application's layers are mapped into it one directory at a time, so the node's other
// mounts stay as they are — even one that cannot be idmapped, on which containerd's own way
// (mapping the layers' common parent, recursively) fails. The runtime user is one of the
// pod's IDs, exec sessions work, and the lease sees the container.
func TestUserNamespacedPods(t *testing.T) {
	// The handler as the agent registers it.
	d := newDataPathOn(t, framework.StartNodeWith(t, framework.NodeOptions{AgentHandler: true}))
	ctx := context.Background()
	volumes := kit.MountNodeVolumes(t, filepath.Join(d.N.HostPrefix, "var", "lib"))

	t.Run("the CRI offers user namespaces on the brewlet handler", func(t *testing.T) {
		st, err := d.N.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range st.RuntimeHandlers {
			if h.Name == vocab.RuntimeClassName {
				if !h.GetFeatures().GetUserNamespaces() {
					t.Fatalf("handler %s: features %v", h.Name, h.Features)
				}
				return
			}
		}
		t.Fatalf("no brewlet handler in %v", st.RuntimeHandlers)
	})

	t.Run("a handler with its own options table offers none, and says why", func(t *testing.T) {
		// containerd could not give such a handler's containers their I/O owner: the kubelet
		// is to refuse the pod, not the node to fail it.
		n := framework.StartNode(t)
		st, err := n.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range st.RuntimeHandlers {
			if h.Name == vocab.RuntimeClassName && h.GetFeatures().GetUserNamespaces() {
				t.Fatalf("handler %s with a table offers user namespaces", h.Name)
			}
		}
		stdin, err := proto.Marshal(mustAny(t, &runtimeoptions.Options{ConfigBody: []byte("Root = \"/run/x\"\n")}))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(n.BinDir, vocab.ShimBinaryName), "-info")
		cmd.Stdin, cmd.Env = bytes.NewReader(stdin), append(os.Environ(), "PATH="+n.BinDir+":"+framework.ToolsBin()+":"+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil || !bytes.Contains(out, []byte("options table")) || !bytes.Contains(out, []byte(`"idmap":{"enabled":false}`)) {
			t.Fatalf("-info of a handler with a table: %v\n%s", err, out)
		}
	})

	t.Run("a stock runc pod with hostUsers: false (the harness runs them)", func(t *testing.T) {
		ns := usernsPod(65536*7, 65536)
		pod := d.N.PodConfig("userns-runc", nil)
		pod.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}
		podID, err := d.N.RunPod(ctx, pod, "runc")
		if err != nil {
			t.Fatal(err)
		}
		c := framework.ContainerConfig("app", d.N.BusyboxImage, "/bin/busybox", "cat", "/proc/self/uid_map")
		c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns}
		cid, err := d.N.CreateStart(ctx, podID, pod, c)
		if err != nil {
			t.Fatal(err)
		}
		if code, log := kit.Exited(t, d.N, cid, pod, "app.log"); code != 0 || !strings.Contains(strings.Join(strings.Fields(log), " "), "0 458752 65536") {
			t.Fatalf("exit %d: %s", code, log)
		}
	})

	const host = 65536 * 8
	var cid string
	t.Run("a brewlet pod with hostUsers: false", func(t *testing.T) {
		var err error
		cid, _, err = startUserns(t, d, usernsPod(host, 65536), "python", "-c", "import time; time.sleep(3600)")
		if err != nil {
			t.Fatal(err)
		}
		out, errOut, code, err := d.N.ExecSync(ctx, cid, "python", "-c", `import os
print("uid_map", " ".join(open("/proc/self/uid_map").read().split()))
print("id", os.getuid(), os.getgid())
print("runtime", os.stat("/usr/bin/python3").st_uid, os.stat("/usr/lib").st_gid)
print("app", os.stat("/app/src").st_uid)
print("home", os.access("/home/app", os.W_OK))`)
		if err != nil || code != 0 {
			t.Fatalf("exec: %v %d %s", err, code, errOut)
		}
		t.Logf("inside the pod:\n%s", out)
		for _, want := range []string{
			fmt.Sprintf("uid_map 0 %d 65536", host), // the pod's own user namespace
			"id 10001 10001",                        // the runtime user, one of the pod's IDs
			"runtime 0 0",                           // the runtime's files mapped: the node's root is the pod's root, not nobody
			"app 0",                                 // the application's layers too
		} {
			if !strings.Contains(out, want) {
				t.Errorf("missing %q", want)
			}
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", kit.ContainerPID(t, d.N, cid)))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("Uid:\t%d\t", host+10001); !strings.Contains(string(status), want) {
			t.Errorf("on the node the process is not uid %d:\n%s", host+10001, status)
		}
		if _, err := d.Host.Lease(cid); err != nil {
			t.Errorf("no lease for the container: %v", err)
		}
	})

	t.Run("nothing on the node is idmapped", func(t *testing.T) {
		mi, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(mi), "\n") {
			// Field 6 holds the mount's own flags, "idmapped" among them.
			if f := strings.Fields(l); len(f) > 5 && slices.Contains(strings.Split(f[5], ","), "idmapped") {
				t.Errorf("an idmapped mount is attached in the node's mount namespace: %s", l)
			}
		}
		for _, v := range volumes {
			if !strings.Contains(string(mi), " "+v+" ") {
				t.Errorf("volume %s is gone", v)
			}
		}
		// The layers were attached for the overlay's mount only.
		if _, err := os.Stat(d.Host.IDMapDir(cid)); !os.IsNotExist(err) {
			t.Errorf("%s left after the create: %v", d.Host.IDMapDir(cid), err)
		}
	})

	t.Run("control: containerd's own mapping of the layers' common parent fails on this node", func(t *testing.T) {
		// The lower directories of a composed root: an application snapshot of the node's
		// containerd and a runtime layer of Brewlet's.
		cur, err := d.Host.Current(kit.PyID)
		if err != nil {
			t.Fatal(err)
		}
		gen, err := d.Host.ReadGeneration(kit.PyID, cur)
		if err != nil {
			t.Fatal(err)
		}
		snaps, _ := filepath.Glob(filepath.Join(d.N.Dir, "root", "io.containerd.snapshotter.v1.overlayfs", "snapshots", "*", "fs"))
		if len(snaps) == 0 {
			t.Fatal("no containerd snapshot found")
		}
		lower := []string{snaps[0], d.Host.LayerDir(strings.TrimPrefix(gen.Layers[0], "sha256:"))}
		target, work, upper := t.TempDir(), t.TempDir(), t.TempDir()
		m := mount.Mount{Type: "overlay", Source: "overlay", Options: []string{
			"lowerdir=" + strings.Join(lower, ":"), "upperdir=" + upper, "workdir=" + work,
			fmt.Sprintf("uidmap=0:%d:65536", host), fmt.Sprintf("gidmap=0:%d:65536", host)}}
		err = m.Mount(target)
		if err == nil {
			_ = mount.UnmountAll(target, 0)
			t.Fatal("containerd mapped the common parent with a ramfs below it: the control proves nothing")
		}
		t.Logf("containerd's mapping: %v", err)
	})

	t.Run("a runtime user outside the pod's IDs is refused", func(t *testing.T) {
		// containerd refuses it first through the CRI (the shim's own check, for other
		// clients, is unit-tested); nothing is leased.
		before, err := d.Host.Leases()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := startUserns(t, d, usernsPod(host, 5000)); err == nil || !strings.Contains(err.Error(), "10001") {
			t.Fatalf("a runtime user outside the pod's 5000 IDs: %v", err)
		}
		if after, _ := d.Host.Leases(); len(after) != len(before) {
			t.Fatalf("leases %d, were %d", len(after), len(before))
		}
	})

	t.Run("stopped and removed, the lease goes", func(t *testing.T) {
		if _, err := d.N.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cid}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.N.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cid}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Host.Lease(cid); err == nil {
			t.Fatal("lease kept after the container was removed")
		}
	})
}

func mustAny(t *testing.T, v any) *anypb.Any {
	t.Helper()
	a, err := typeurl.MarshalAnyToProto(v)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
