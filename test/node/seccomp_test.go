package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// userNSProbe tries to create a user namespace as the container's process: the call a
// process without capabilities can still make, and the one that hands them back inside.
const userNSProbe = `grep Seccomp: /proc/self/status; grep CapEff /proc/self/status; ` +
	`BB unshare -U BB true 2>&1 && echo userns-created || echo userns-refused`

// Whatever seccomp profile containerd generated for the capabilities a pod asked for, a
// Brewlet container runs under the profile for no capabilities: a pod that reached the node
// asking for CAP_SYS_ADMIN with RuntimeDefault cannot create a user namespace, where the same
// request on the stock runc handler can. A Localhost profile that opens unshare is refused.
func TestShimSeccompForNoCapabilities(t *testing.T) {
	d := newDataPath(t)
	app := pushBusyboxApp(t, d)
	sysAdmin := func(c *runtimeapi.ContainerConfig, bb string) {
		c.Image = &runtimeapi.ImageSpec{Image: app}
		c.Command = []string{bb, "sh", "-c", strings.ReplaceAll(userNSProbe, "BB", bb)}
		c.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"SYS_ADMIN"}}
		c.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	}

	t.Run("RuntimeDefault with CAP_SYS_ADMIN is narrowed", func(t *testing.T) {
		cid, pod, err := d.StartIn(t, nil, nil, func(c *runtimeapi.ContainerConfig) { sysAdmin(c, "/app/bin/busybox") })
		if err != nil {
			t.Fatal(err)
		}
		out := d.Output(t, cid, pod)
		t.Logf("brewlet container:\n%s", out)
		for _, want := range []string{"Seccomp:\t2", "CapEff:\t0000000000000000", "userns-refused", "Operation not permitted"} {
			if !strings.Contains(out, want) {
				t.Errorf("inside the container: lacks %q:\n%s", want, out)
			}
		}
		// The control: the same request on the stock handler, as the same non-root user,
		// creates the namespace, so the refusal above is the shim's filter and not the
		// kernel's settings.
		stock := stockRun(t, d.N, func(c *runtimeapi.ContainerConfig) { sysAdmin(c, "/bin/busybox"); c.Image.Image = d.N.BusyboxImage })
		t.Logf("stock runc container with the same request:\n%s", stock)
		if !strings.Contains(stock, "userns-created") {
			t.Errorf("control: the stock handler refused the user namespace too, so the test proves nothing:\n%s", stock)
		}
	})

	// The narrowed filter names only the node's own ABI: a 64-bit process entering the
	// kernel through the 32-bit gate (int 0x80) loses the calling thread to seccomp, where
	// the stock handler's RuntimeDefault, which lists x86 and x32 too, lets the call run.
	t.Run("RuntimeDefault admits only the native system-call ABI", func(t *testing.T) {
		if runtime.GOARCH != "amd64" {
			t.Fatalf("the probe is amd64 assembly; this node is %s", runtime.GOARCH)
		}
		defaultFilter := func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
		}
		probeBin := compat32Probe(t)
		// A kernel without IA32 emulation faults the 32-bit gate for every process (SIGSEGV),
		// so no filter is needed there and none can be shown: the call must still fail in
		// the container, and the filter's architecture list is proven by the shim's unit
		// tests (TestNeutralizeKeepsOnlyTheNativeABI).
		hostOut, _ := exec.Command(probeBin).CombinedOutput()
		ia32 := strings.Contains(string(hostOut), "compat32-getpid=")
		cid, pod, err := d.StartIn(t, nil, nil, func(c *runtimeapi.ContainerConfig) {
			c.Image = &runtimeapi.ImageSpec{Image: app}
			c.Command = []string{"/app/bin/compat32"}
			defaultFilter(c)
		})
		if err != nil {
			t.Fatal(err)
		}
		code, out := kit.Exited(t, d.N, cid, pod, "app.log")
		t.Logf("brewlet container (exit %d):\n%s", code, out)
		if strings.Contains(out, "compat32-getpid=") {
			t.Fatalf("brewlet container: the 32-bit call ran:\n%s", out)
		}
		if !ia32 {
			t.Logf("this kernel has no IA32 emulation (on the host the probe got: %.200q): the 32-bit gate is closed for every process, the container's call failed too", hostOut)
			return
		}
		if code != 0 || !strings.Contains(out, "compat32-thread-gone") {
			t.Errorf("brewlet container: the 32-bit call was not stopped by the filter:\n%s", out)
		}
		probe := filepath.Dir(probeBin)
		stock := stockRun(t, d.N, func(c *runtimeapi.ContainerConfig) {
			c.Command = []string{"/probe/compat32"}
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/probe", HostPath: probe, Readonly: true}}
			defaultFilter(c)
		})
		t.Logf("stock runc container with the same filter request:\n%s", stock)
		if !strings.Contains(stock, "compat32-getpid=") {
			t.Errorf("control: the 32-bit call failed on the stock handler too (a kernel without IA32 emulation?), so the test proves nothing:\n%s", stock)
		}
	})

	t.Run("a Localhost profile opening unshare is refused", func(t *testing.T) {
		prof := filepath.Join(t.TempDir(), "open-unshare.json")
		if err := os.WriteFile(prof, []byte(`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["unshare","read","write"],"action":"SCMP_ACT_ALLOW"}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := d.StartIn(t, nil, nil, func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: prof}
		})
		kit.ExpectReason(t, err, vocab.ReasonPrivilegeNotSupported)
		if !strings.Contains(err.Error(), "lets unshare run") {
			t.Errorf("refusal does not name the call: %v", err)
		}
	})

	// Profiles that look closed and are not: unshare handed to a tracer (a process may trace
	// its own child and let the call through), and unshare "without CLONE_NEWUSER" judged on
	// an argument unshare does not have (a register the caller fills).
	for name, rule := range map[string]string{
		"a Localhost profile tracing unshare is refused":                                `{"names":["unshare"],"action":"SCMP_ACT_TRACE"}`,
		"a Localhost profile judging unshare by a register it does not read is refused": `{"names":["unshare"],"action":"SCMP_ACT_ALLOW","args":[{"index":1,"value":268435456,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			prof := filepath.Join(t.TempDir(), "profile.json")
			body := `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"},` + rule + `]}`
			if err := os.WriteFile(prof, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err := d.StartIn(t, nil, nil, func(c *runtimeapi.ContainerConfig) {
				c.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: prof}
			})
			kit.ExpectReason(t, err, vocab.ReasonPrivilegeNotSupported)
			if !strings.Contains(err.Error(), "lets unshare run") {
				t.Errorf("refusal does not name the call: %v", err)
			}
		})
	}
}

// pushBusyboxApp pushes an application whose only layer holds a static busybox at
// /app/bin/busybox, for probes the runtime's own tools cannot run.
func pushBusyboxApp(t *testing.T, d *kit.DataPath) string {
	t.Helper()
	src := t.TempDir()
	b, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err = os.ReadFile(compat32Probe(t)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "compat32"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	ref := d.N.Registry + "/apps/busybox-probe:1"
	if _, errOut, code := kit.Brewlet(t, d.CLI, "push", ref, "--layer", "app="+src+":/app/bin",
		"--entrypoint", "/app/bin/busybox", "--requires-runtime", kit.PyID); code != 0 {
		t.Fatalf("push busybox app: %s", errOut)
	}
	return ref
}

// compat32Probe builds testdata/compat32 (a static binary making one 32-bit system call)
// into a directory of its own and returns its path.
func compat32Probe(t *testing.T) string {
	t.Helper()
	if pre := framework.Prebuilt("compat32"); pre != "" {
		return pre
	}
	path := filepath.Join(t.TempDir(), "compat32")
	cmd := exec.Command("go", "build", "-o", path, "./testdata/compat32")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the 32-bit call probe: %v: %s", err, out)
	}
	return path
}

// stockRun runs one container on the stock runc handler as uid 10001 and returns its log.
func stockRun(t *testing.T, n *framework.Node, mutate func(*runtimeapi.ContainerConfig)) string {
	t.Helper()
	ctx := context.Background()
	pod := n.PodConfig("stock-run", nil)
	podID, err := n.RunPod(ctx, pod, "runc")
	if err != nil {
		t.Fatal(err)
	}
	c := framework.ContainerConfig("app", n.BusyboxImage)
	c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: 10001}}
	mutate(c)
	cid, err := n.CreateStart(ctx, podID, pod, c)
	if err != nil {
		t.Fatal(err)
	}
	_, log := kit.Exited(t, n, cid, pod, "app.log")
	return log
}
