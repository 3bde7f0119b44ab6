package node

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// probePy prints what the kernel says about the process's confinement.
const probePy = `import os, stat
s = open('/proc/self/status').read()
print([l for l in s.splitlines() if l.startswith(('Seccomp:', 'CapEff', 'NoNewPrivs'))])
present = [p for p in ('/proc/kcore', '/proc/keys', '/proc/timer_list', '/proc/interrupts') if os.path.exists(p)]
print('masked', len(present) > 0 and all(stat.S_ISCHR(os.stat(p).st_mode) for p in present), present)
ro = [l.split()[4] for l in open('/proc/self/mountinfo') if l.split()[5].split(',')[0] == 'ro']
print('ro-proc-sys', '/proc/sys' in ro, 'ro-sys', '/sys' in ro)
print('devices', sorted(os.listdir('/dev')))
`

// The shim judges the whole container spec: a privileged pod, host namespaces and groups
// that own host devices are refused; an unconfined seccomp filter and missing masked paths
// are closed, proven from inside the container and against the stock runc handler.
func TestShimConfinesTheWholeSpec(t *testing.T) {
	d := newDataPath(t)

	t.Run("privileged pod is refused", func(t *testing.T) {
		_, _, err := d.StartIn(t, nil, &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}, func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.Privileged = true
		})
		kit.ExpectReason(t, err, vocab.ReasonPrivilegeNotSupported)
		if !strings.Contains(err.Error(), "host device") {
			t.Errorf("refusal does not name the host devices: %v", err)
		}
	})

	for _, tc := range []struct {
		name string
		ns   *runtimeapi.NamespaceOption
		want string
	}{
		{"hostNetwork", &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}, "hostNetwork"},
		{"hostPID", &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE}, "hostPID"},
		{"hostIPC", &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}, "hostIPC"},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			_, _, err := d.StartIn(t, nil, &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: tc.ns}, func(c *runtimeapi.ContainerConfig) {
				c.Linux.SecurityContext.NamespaceOptions = tc.ns
			})
			kit.ExpectReason(t, err, vocab.ReasonPrivilegeNotSupported)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refusal does not name %s: %v", tc.want, err)
			}
		})
	}

	t.Run("a supplementary group that owns a host device is refused", func(t *testing.T) {
		gid, dev := hostDeviceGroup(t, d.N)
		_, _, err := d.StartIn(t, nil, nil, func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.SupplementalGroups = []int64{int64(gid)}
		})
		kit.ExpectReason(t, err, vocab.ReasonPrivilegeNotSupported)
		if !strings.Contains(err.Error(), dev) {
			t.Errorf("refusal does not name %s: %v", dev, err)
		}
	})

	t.Run("unconfined seccomp and no masked paths are closed", func(t *testing.T) {
		unconfined := func(c *runtimeapi.ContainerConfig) {
			c.Command = []string{"python", "-c", probePy}
			c.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
			// What a crictl user gets, and what procMount: Unmasked asks for: no masked or
			// read-only paths at all.
			c.Linux.SecurityContext.MaskedPaths = nil
			c.Linux.SecurityContext.ReadonlyPaths = nil
		}
		cid, pod, err := d.StartIn(t, nil, nil, unconfined)
		if err != nil {
			t.Fatal(err)
		}
		out := d.Output(t, cid, pod)
		t.Logf("brewlet container:\n%s", out)
		for _, want := range []string{`Seccomp:\t2`, `CapEff:\t0000000000000000`, `NoNewPrivs:\t1`, "masked True", "ro-proc-sys True ro-sys True"} {
			if !strings.Contains(out, want) {
				t.Errorf("inside the container: lacks %q:\n%s", want, out)
			}
		}
		// The same request on the stock runc handler really is unconfined: the check above
		// can fail.
		stock := stockProbe(t, d.N)
		t.Logf("stock runc container with the same request:\n%s", stock)
		if !strings.Contains(stock, "Seccomp:\t0") {
			t.Errorf("control: the stock handler confined an Unconfined request, so the test proves nothing:\n%s", stock)
		}
	})

	// The shim signals the init process itself (not through `runc kill`) and answers the
	// delete action from the bundle: the application must still get exactly its stop signal,
	// and the stop must leave nothing of the container behind.
	t.Run("the stop signal reaches the application and the stop leaves nothing behind", func(t *testing.T) {
		cid, _, err := d.StartIn(t, nil, nil, func(c *runtimeapi.ContainerConfig) {
			c.Command = []string{"python", "-c", "import signal, sys, time\n" +
				"signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n" +
				"while True: time.sleep(1)"}
		})
		if err != nil {
			t.Fatal(err)
		}
		app := kit.ContainerPID(t, d.N, cid)
		// SIGTERM's default action does nothing to a PID namespace's init: wait until the
		// handler is installed, or the stop would end in SIGKILL whatever the shim does.
		for deadline := time.Now().Add(60 * time.Second); !catches(app, syscall.SIGTERM); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the application did not install its SIGTERM handler in 60s")
			}
		}
		ctx := context.Background()
		if _, err := d.N.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cid, Timeout: 60}); err != nil {
			t.Fatal(err)
		}
		st, err := d.N.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cid})
		if err != nil {
			t.Fatal(err)
		}
		if code := st.GetStatus().GetExitCode(); code != 42 {
			t.Fatalf("exit code %d, want 42 (the application's SIGTERM handler; 137 would be SIGKILL after the timeout)", code)
		}
		if _, err := d.N.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cid, Timeout: 1}); err != nil {
			t.Fatalf("a second stop: %v", err)
		}
		for _, gone := range []string{filepath.Join(d.N.Dir, "runc", "k8s.io", cid), d.Host.LeaseFile(cid), d.Host.ContainerDir(cid)} {
			if _, err := os.Stat(gone); !os.IsNotExist(err) {
				t.Errorf("%s after the stop: %v (want it gone)", gone, err)
			}
		}
		if !processGone(app) {
			t.Errorf("application process %d still runs after the stop", app)
		}
	})

	t.Run("a crashed shim's lease and exec state are released by its delete", func(t *testing.T) {
		cid, pod, err := d.StartIn(t, nil, nil, func(c *runtimeapi.ContainerConfig) {
			c.Command = []string{"python", "-c", "import time; time.sleep(3600)"}
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(d.Host.LeaseFile(cid)); err != nil {
			t.Fatalf("no lease for a running container: %v", err)
		}
		app := kit.ContainerPID(t, d.N, cid)
		pid := shimPID(t, d.N, pod.Metadata.Uid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// runc still has the container: the delete action must run runc (not answer from
		// the bundle, as it does for a container the shim deleted itself), which kills it.
		runcState := filepath.Join(d.N.Dir, "runc", "k8s.io", cid)
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, lerr := os.Stat(d.Host.LeaseFile(cid))
			_, serr := os.Stat(d.Host.ContainerDir(cid))
			_, rerr := os.Stat(runcState)
			if os.IsNotExist(lerr) && os.IsNotExist(serr) && os.IsNotExist(rerr) && processGone(app) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("60s after the shim was killed: lease %v, exec state %v, runc state %v, application process gone %v (want all gone)",
					lerr, serr, rerr, processGone(app))
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
}

// catches reports whether pid has a handler installed for sig (SigCgt of its status).
func catches(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// processGone reports whether pid has exited (no longer listed, or a zombie awaiting its
// parent).
func processGone(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	_, after, ok := strings.Cut(string(b), ") ")
	return ok && strings.HasPrefix(after, "Z")
}

// hostDeviceGroup makes a device node owned by a non-root group in the device tree the
// node's shims scan (the node's /dev in production), as a disk owned by group "disk" is.
func hostDeviceGroup(t *testing.T, n *framework.Node) (uint32, string) {
	t.Helper()
	const gid = 4242
	dev := filepath.Join(n.DevRoot(), "disk0")
	if err := os.MkdirAll(n.DevRoot(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(dev, syscall.S_IFBLK|0o660, 7<<8|200); err != nil {
		t.Fatalf("mknod %s: %v", dev, err)
	}
	if err := os.Lchown(dev, 0, gid); err != nil {
		t.Fatal(err)
	}
	return gid, dev
}

// stockProbe runs the probe's seccomp line in busybox on the stock runc handler, asking for
// Unconfined.
func stockProbe(t *testing.T, n *framework.Node) string {
	t.Helper()
	return stockRun(t, n, func(c *runtimeapi.ContainerConfig) {
		c.Command = []string{"grep", "Seccomp:", "/proc/self/status"}
		c.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
	})
}

// shimPID finds the shim serving a pod: the brewlet shim whose command line names this
// node's containerd socket and the pod's sandbox ID.
func shimPID(t *testing.T, n *framework.Node, podUID string) int {
	t.Helper()
	ctx := context.Background()
	pods, err := n.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var sandboxID string
	for _, p := range pods.Items {
		if p.Metadata.Uid == podUID {
			sandboxID = p.Id
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && strings.HasSuffix(args[0], "containerd-shim-brewlet-v2") && strings.Contains(string(b), sandboxID) &&
			strings.Contains(string(b), n.Socket) {
			return pid
		}
	}
	t.Fatalf("no brewlet shim found for sandbox %s", sandboxID)
	return 0
}
