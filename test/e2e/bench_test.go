//go:build bench

package e2e

import (
	"archive/tar"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/framework/testimage"
)

// TestBenchShim measures, in one run on one node, the brewlet shim against the stock runc
// shim: memory (PSS) per pod and container create+start latency through CRI. It prints a
// table of ratios; it asserts nothing about timings. Run with `make bench`.
func TestBenchShim(t *testing.T) {
	pods := 6
	if v, err := strconv.Atoi(os.Getenv("BENCH_PODS")); err == nil && v > 0 {
		pods = v
	}
	n := framework.StartNode(t)
	host := hoststate.Under(n.HostPrefix)
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	rt := pushRuntime(t, n.Registry+"/runtimes/bench:1", []testimage.TarEntry{
		{Name: "bin/", Mode: 0o755, Typeflag: tar.TypeDir},
		{Name: "bin/busybox", Mode: 0o755, Body: bb},
	}, nil)
	in := &install.Installer{Layout: host, Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}
	const id, epoch = "bench", "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a"
	if _, err := in.Install(context.Background(), install.Request{ID: id, Epoch: epoch, Generation: 1, Image: rt, UID: 20001, GID: 20001}); err != nil {
		t.Fatal(err)
	}
	_ = host.OpenFence()
	now := time.Now()
	_ = host.WriteAuthorization(hoststate.Authorization{ID: id, Epoch: epoch, Generation: 1, ConfirmedAt: now, ExpiresAt: now.Add(time.Hour)})
	cli := buildCLI(t)
	src := t.TempDir()
	writeTree(t, src, map[string]string{"README": "bench\n"})
	out, errOut, code := brewlet(t, cli, "push", n.Registry+"/apps/sleep:1", "--layer", "app="+src+":/app",
		"--entrypoint", "/bin/busybox", "--arg", "sleep", "--arg", "3600")
	if code != 0 {
		t.Fatal(errOut)
	}
	app := lastLine(out)

	type result struct {
		first   time.Duration
		warm    []time.Duration
		pssKiB  []int
		handler string
	}
	run := func(handler, image string, ann map[string]string) result {
		r := result{handler: handler}
		ctx := context.Background()
		for i := 0; i < pods; i++ {
			pod := n.PodConfig(fmt.Sprintf("%s-%d", handler, i), ann)
			podID, err := n.RunPod(ctx, pod, handler)
			if err != nil {
				t.Fatal(err)
			}
			c := framework.ContainerConfig("c", image, "/bin/busybox", "sleep", "3600")
			c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
				RunAsUser: &runtimeapi.Int64Value{Value: 20001}, RunAsGroup: &runtimeapi.Int64Value{Value: 20001}}
			if err := n.Pull(ctx, image, pod); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			cr, err := n.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: c, SandboxConfig: pod})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
				t.Fatal(err)
			}
			d := time.Since(t0)
			if i == 0 {
				r.first = d
			} else {
				r.warm = append(r.warm, d)
			}
		}
		r.pssKiB = shimPSS(t, n.Dir, handler)
		return r
	}
	busybox := n.BusyboxImage
	runc := run("runc", busybox, nil)
	brew := run(vocab.RuntimeClassName, app, map[string]string{vocab.AnnotationRuntimeImage: id})

	med := func(ds []time.Duration) time.Duration {
		s := append([]time.Duration{}, ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	mean := func(xs []int) float64 {
		sum := 0
		for _, x := range xs {
			sum += x
		}
		return float64(sum) / float64(len(xs))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| metric (%d pods per handler) | runc | brewlet | ratio | target |\n|---|---|---|---|---|\n", pods)
	fmt.Fprintf(&b, "| shim PSS per pod (KiB, mean of %d shims) | %.0f | %.0f | %.2f× | ≤ 1.5× |\n", len(brew.pssKiB), mean(runc.pssKiB), mean(brew.pssKiB), mean(brew.pssKiB)/mean(runc.pssKiB))
	fmt.Fprintf(&b, "| create+start, first container | %s | %s | %.2f× | ≤ 1.5× |\n", runc.first.Round(time.Millisecond), brew.first.Round(time.Millisecond), float64(brew.first)/float64(runc.first))
	fmt.Fprintf(&b, "| create+start, warm (median) | %s | %s | %.2f× | ≤ 1.2× |\n", med(runc.warm).Round(time.Millisecond), med(brew.warm).Round(time.Millisecond), float64(med(brew.warm))/float64(med(runc.warm)))
	t.Log(b.String())
	fmt.Print(b.String())
}

// shimPSS returns the proportional set size of each shim of a handler on this node.
func shimPSS(t *testing.T, nodeDir, handler string) []int {
	bin := "containerd-shim-runc-v2"
	if handler == vocab.RuntimeClassName {
		bin = vocab.ShimBinaryName
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), nodeDir) || !strings.HasSuffix(strings.SplitN(string(b), "\x00", 2)[0], bin) {
			continue
		}
		sm, err := os.ReadFile(filepath.Join(filepath.Dir(p), "smaps_rollup"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(sm), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "Pss:" {
				v, _ := strconv.Atoi(f[1])
				out = append(out, v)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s processes found", bin)
	}
	return out
}

// TestBenchInstall compares installing a runtime generation (pull by digest, verify,
// extract into the layer cache, validate) with containerd's own `ctr image pull` (pull and
// unpack into the overlayfs snapshotter) of the same image from the same loopback
// registry, cold and for a rotation to CPython's Debian security update (the runtime's
// own packages and the metadata layer change, the base libraries do not).
func TestBenchInstall(t *testing.T) {
	n := framework.StartNode(t)
	refs := buildRuntimes(t, n.Registry, "python")
	host := hoststate.Under(n.HostPrefix)
	in := &install.Installer{Layout: host, Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}
	ctr := framework.Tool(t, "ctr")
	pull := func(ref string) time.Duration {
		t0 := time.Now()
		cmd := exec.Command(ctr, "-a", n.Socket, "-n", "bench", "images", "pull", "--plain-http", ref)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ctr pull: %v\n%s", err, out)
		}
		return time.Since(t0)
	}
	installGen := func(gen int64) time.Duration {
		t0 := time.Now()
		if _, err := in.Install(context.Background(), install.Request{ID: "py", Epoch: "3e1f2d4c-5b6a-4978-8c0d-1e2f3a4b5c6d",
			Generation: gen, Image: refs[fmt.Sprintf("python%d", gen)], UID: 10001, GID: 10001}); err != nil {
			t.Fatal(err)
		}
		return time.Since(t0)
	}
	ctrCold, ctrDelta := pull(refs["python1"]), pull(refs["python2"])
	brCold, brDelta := installGen(1), installGen(2)
	var b strings.Builder
	fmt.Fprintf(&b, "\n| metric (CPython runtime, 3 layers) | ctr image pull + unpack | brewlet install | ratio | target |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| cold install | %s | %s | %.2f× | ≤ 1.0× |\n", ctrCold.Round(time.Millisecond), brCold.Round(time.Millisecond), float64(brCold)/float64(ctrCold))
	fmt.Fprintf(&b, "| rotation to the security update, 2 of 3 layers changed | %s | %s | %.2f× | ∝ changed bytes |\n", ctrDelta.Round(time.Millisecond), brDelta.Round(time.Millisecond), float64(brDelta)/float64(ctrDelta))
	t.Log(b.String())
	fmt.Print(b.String())
}
