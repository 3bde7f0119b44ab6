package node

import (
	"archive/tar"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	"brewlet.sh/brewlet/test/kit"
)

func newDataPath(t *testing.T) *kit.DataPath {
	t.Helper()
	return newDataPathOn(t, framework.StartNode(t))
}

// newDataPathOn is newDataPath on a node already started.
func newDataPathOn(t *testing.T, n *framework.Node) *kit.DataPath {
	t.Helper()
	d := &kit.DataPath{N: n, Host: hoststate.Under(n.HostPrefix), Epoch: "0c6f9a52-1b7e-4d2a-9c1e-5a8f3e2d4b10"}
	d.Refs = kit.BuildRuntimes(t, n.Registry, "python")
	d.Inst = &install.Installer{Layout: d.Host, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}
	d.Install(t, 1)
	if err := d.Host.OpenFence(); err != nil {
		t.Fatal(err)
	}
	// As an agent exporting metrics does: shims then time their starts.
	if err := d.Host.EnableLaunchDurations(); err != nil {
		t.Fatal(err)
	}
	d.Authorize(t, false, 5*time.Minute)
	d.CLI = kit.BuildCLI(t)
	d.App = kit.PushHello(t, d.CLI, n.Registry, "--requires-runtime", kit.PyID)
	return d
}

// A Python application whose image holds only /app runs on the node's CPython runtime,
// as the runtime's non-root user, with the runtime's PATH whatever the pod sets.
func TestDataPathRunsAppOnRuntime(t *testing.T) {
	d := newDataPath(t)
	cid, pod, err := d.Start(t, nil, nil)
	if err != nil {
		t.Fatalf("start app: %v", err)
	}
	out := d.Output(t, cid, pod)
	t.Logf("application output (image holds only /app; interpreter from runtime %s):\n%s", kit.PyID, out)
	for _, want := range []string{"exe /usr/bin/python", "uid 10001 gid 10001", "path /usr/local/bin:/usr/bin:/bin",
		"home /home/app", "release BREWLET_RUNTIME_GENERATION=1", "appfiles ['src']"} {
		if !strings.Contains(out, want) {
			t.Errorf("app output lacks %q:\n%s", want, out)
		}
	}

	t.Run("exec gets the container's identity, no capabilities and the runtime PATH", func(t *testing.T) {
		cid, _, err := d.Start(t, nil, func(c *runtimeapi.ContainerConfig) {
			c.Command = []string{"python", "-c", "import time; time.sleep(3600)"}
		})
		if err != nil {
			t.Fatal(err)
		}
		out, errOut, code, err := d.N.ExecSync(context.Background(), cid, "python", "-c",
			"import os; s=open('/proc/self/status').read(); print(os.getuid(), os.environ['PATH'], [l for l in s.splitlines() if l.startswith(('CapEff','CapPrm','NoNewPrivs'))])")
		if err != nil || code != 0 {
			t.Fatalf("exec: %v %d %s", err, code, errOut)
		}
		for _, want := range []string{"10001 /usr/local/bin:/usr/bin:/bin", "CapEff:\\t0000000000000000", "CapPrm:\\t0000000000000000", "NoNewPrivs:\\t1"} {
			if !strings.Contains(out, want) {
				t.Errorf("exec output lacks %q: %s", want, out)
			}
		}
		// Packaged /app is read-only to the process.
		_, errOut, code, _ = d.N.ExecSync(context.Background(), cid, "python", "-c", "open('/app/src/x','w')")
		if code == 0 || !strings.Contains(errOut, "Read-only file system") {
			t.Errorf("/app writable: %d %s", code, errOut)
		}
		// An exec that asks for root (CRI cannot, containerd's own API can) still runs as the
		// container's user.
		ctr := exec.Command(framework.Tool(t, "ctr"), "-a", d.N.Socket, "-n", "k8s.io", "task", "exec", "--exec-id", "as-root",
			"--user", "0", cid, "python", "-c", "import os; print('uid', os.getuid(), os.getgid())")
		if out, err := ctr.CombinedOutput(); err != nil || !strings.Contains(string(out), "uid 10001 10001") {
			t.Errorf("exec asking for root: %v %s", err, out)
		}
		// Without the container's saved state an exec is refused, not run with defaults.
		state := filepath.Join(d.Host.ContainerDir(cid), "exec.json")
		saved, err := os.ReadFile(state)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(state); err != nil {
			t.Fatal(err)
		}
		_, _, _, err = d.N.ExecSync(context.Background(), cid, "python", "-c", "print(1)")
		kit.ExpectReason(t, err, vocab.ReasonExecStateUnavailable)
		if err := os.WriteFile(state, saved, 0o600); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("exec state and lease survive a containerd restart; delete releases the lease", func(t *testing.T) {
		ctx := context.Background()
		cid, _, err := d.Start(t, nil, func(c *runtimeapi.ContainerConfig) {
			c.Command = []string{"python", "-c", "import time; time.sleep(3600)"}
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.N.RestartContainerd(ctx); err != nil {
			t.Fatal(err)
		}
		out, _, code, err := d.N.ExecSync(ctx, cid, "python", "-c", "import os; print(os.getuid(), os.environ['PATH'])")
		if err != nil || code != 0 || !strings.Contains(out, "10001 /usr/local/bin:/usr/bin:/bin") {
			t.Fatalf("exec after containerd restart: %v %d %q", err, code, out)
		}
		if _, err := d.N.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cid, Timeout: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.N.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cid}); err != nil {
			t.Fatal(err)
		}
		leases, err := d.Host.Leases()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range leases {
			if l.ContainerID == cid {
				t.Fatalf("lease of a deleted container kept: %+v", l)
			}
		}
		if _, err := os.Stat(d.Host.ContainerDir(cid)); !os.IsNotExist(err) {
			t.Fatalf("exec state of a deleted container kept: %v", err)
		}
	})

	t.Run("a container exiting with an error right after its start is recorded as a failed start; a stopped one and a clean exit are not", func(t *testing.T) {
		ctx := context.Background()
		exit := func(code string) (string, *runtimeapi.PodSandboxConfig) {
			cid, pod, err := d.Start(t, nil, func(c *runtimeapi.ContainerConfig) {
				c.Command = []string{"python", "-c", "import sys; sys.exit(" + code + ")"}
			})
			if err != nil {
				t.Fatal(err)
			}
			if got, log := kit.Exited(t, d.N, cid, pod, "app.log"); strconv.Itoa(int(got)) != code {
				t.Fatalf("exit code %d, want %s: %s", got, code, log)
			}
			return cid, pod
		}
		failed, pod := exit("3")
		clean, _ := exit("0")
		stopped, _, err := d.Start(t, nil, func(c *runtimeapi.ContainerConfig) {
			c.Command = []string{"python", "-c", "import time; time.sleep(3600)"}
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.N.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: stopped, Timeout: 1}); err != nil {
			t.Fatal(err)
		}
		for _, cid := range []string{failed, clean, stopped} {
			if _, err := d.N.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cid}); err != nil {
				t.Fatal(err)
			}
		}
		recs, err := d.Host.ReadFailedStarts(time.Now(), hoststate.FailedStartsKept, false)
		if err != nil {
			t.Fatal(err)
		}
		var found *hoststate.FailedStart
		for i, r := range recs {
			switch r.ContainerID {
			case failed:
				found = &recs[i]
			case clean, stopped:
				t.Errorf("recorded as a failed start: %+v", r)
			}
		}
		if found == nil || found.ExitCode != 3 || found.ID != kit.PyID || found.Generation != 1 || found.PodName != pod.Metadata.Name ||
			found.PodUID != pod.Metadata.Uid || found.ExitedAt.Before(found.CreatedAt) {
			t.Fatalf("the failed start of %s: %+v (records %+v)", failed, found, recs)
		}
	})

	t.Run("rotation: new containers on generation 2, running ones keep 1", func(t *testing.T) {
		old, _, err := d.Start(t, nil, func(c *runtimeapi.ContainerConfig) {
			c.Command = []string{"python", "-c", "import time; time.sleep(3600)"}
		})
		if err != nil {
			t.Fatal(err)
		}
		d.Install(t, 2)
		d.Authorize(t, false, 5*time.Minute)
		cid, pod, err := d.Start(t, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out := d.Output(t, cid, pod); !strings.Contains(out, "release BREWLET_RUNTIME_GENERATION=2") {
			t.Fatalf("new container not on generation 2:\n%s", out)
		}
		out, _, _, err := d.N.ExecSync(context.Background(), old, "python", "-c", "print(open('/etc/brewlet-runtime-release').read())")
		if err != nil || !strings.Contains(out, "GENERATION=1") {
			t.Fatalf("running container moved off generation 1: %v %q", err, out)
		}
		leases, err := d.Host.Leases()
		if err != nil {
			t.Fatal(err)
		}
		onOne := false
		for _, l := range leases {
			if l.ContainerID == old && l.Generation == 1 {
				onOne = true
			}
		}
		if !onOne {
			t.Fatalf("no lease keeps generation 1 for the running container: %+v", leases)
		}
	})

	t.Run("refusals carry their reasons", func(t *testing.T) {
		_, _, err := d.Start(t, map[string]string{}, nil)
		kit.ExpectReason(t, err, vocab.ReasonRuntimeImageRequired)
		_, _, err = d.Start(t, map[string]string{vocab.AnnotationRuntimeImage: "Python:3"}, nil)
		kit.ExpectReason(t, err, vocab.ReasonInvalidRuntimeImageID)
		_, _, err = d.Start(t, map[string]string{vocab.AnnotationRuntimeImage: "python-3.13"}, nil)
		kit.ExpectReason(t, err, vocab.ReasonRuntimeImageIncompatible)
		_, _, err = d.Start(t, nil, func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 0}
		})
		kit.ExpectReason(t, err, vocab.ReasonRootNotSupported)
		_, _, err = d.Start(t, nil, func(c *runtimeapi.ContainerConfig) { c.Image.Image = d.N.BusyboxImage })
		kit.ExpectReason(t, err, vocab.ReasonUnsupportedArtifact)
		_, _, err = d.Start(t, map[string]string{vocab.AnnotationRuntimeImage: kit.PyID,
			vocab.AnnotationRotatedToGeneration: `{"id":"` + kit.PyID + `","epoch":"` + d.Epoch + `","generation":9}`}, nil)
		kit.ExpectReason(t, err, vocab.ReasonRuntimeImageUpdating)
		// The manifest and config are checked from containerd's content store.
		okApp := [][]testimage.TarEntry{{{Name: "app/", Mode: 0o755, Typeflag: tar.TypeDir}, {Name: "app/x", Mode: 0o644, Body: []byte("x")}}}
		mismatch := pushCrafted(t, d.N.Registry+"/apps/mismatch:1", func(c *v1.Config) { c.Entrypoint = []string{"/app/other"} }, vocab.ArtifactVersion, okApp...)
		_, _, err = d.Start(t, nil, func(c *runtimeapi.ContainerConfig) { c.Image.Image = mismatch })
		kit.ExpectReason(t, err, vocab.ReasonLaunchConfigMismatch)
		// The node remembers the verdicts on both images (the app's pass, this refusal), and
		// a second create of the refused one is refused alike from that memory.
		if ents, err := os.ReadDir(filepath.Join(d.Host.State, "image-verdicts")); err != nil || len(ents) < 2 {
			t.Errorf("image verdicts not remembered: %v %d", err, len(ents))
		}
		_, _, err = d.Start(t, nil, func(c *runtimeapi.ContainerConfig) { c.Image.Image = mismatch })
		kit.ExpectReason(t, err, vocab.ReasonLaunchConfigMismatch)
		unversioned := pushCrafted(t, d.N.Registry+"/apps/unversioned:1", nil, "", okApp...)
		_, _, err = d.Start(t, nil, func(c *runtimeapi.ContainerConfig) { c.Image.Image = unversioned })
		kit.ExpectReason(t, err, vocab.ReasonUnsupportedArtifact)

		// The hostile layers that survive containerd's unpacking are refused from the
		// snapshot before anything is mounted.
		dir := func(name string, mode int64) testimage.TarEntry {
			return testimage.TarEntry{Name: name, Mode: mode, Typeflag: tar.TypeDir}
		}
		app := dir("app/", 0o755)
		for i, entries := range [][]testimage.TarEntry{
			{{Name: "etc/passwd", Mode: 0o644, Body: []byte("root::0:0::/:/bin/sh\n")}},
			{app, {Name: "app/passwd", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}},
			{app, {Name: "app/up", Typeflag: tar.TypeSymlink, Linkname: "../etc"}},
			{app, {Name: "app/su", Mode: 0o4755, Body: []byte("x")}},
			{app, {Name: "app/mem", Mode: 0o644, Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1}},
			{app, {Name: "app/pipe", Mode: 0o644, Typeflag: tar.TypeFifo}},
			{app, {Name: "app/secret", Mode: 0o600, Body: []byte("x")}},
			{app, dir("app/private/", 0o700)},
			// containerd drops whiteouts of an image's base layer (nothing below to hide), so
			// this one sits on a second layer, where it would hide the runtime's /usr.
			{{Name: ".wh.usr", Mode: 0o644}},
		} {
			layers := [][]testimage.TarEntry{entries}
			if entries[0].Name == ".wh.usr" {
				layers = [][]testimage.TarEntry{{app, {Name: "app/x", Mode: 0o644, Body: []byte("x")}}, entries}
			}
			hostile := pushHandmadeEntries(t, fmt.Sprintf("%s/apps/hostile:%d", d.N.Registry, i), layers...)
			_, _, err = d.Start(t, nil, func(c *runtimeapi.ContainerConfig) { c.Image.Image = hostile })
			kit.ExpectReason(t, err, vocab.ReasonLayerPathViolation)
		}

		running, _, err := d.Start(t, nil, func(c *runtimeapi.ContainerConfig) {
			c.Command = []string{"python", "-c", "import time; time.sleep(3600)"}
		})
		if err != nil {
			t.Fatal(err)
		}
		d.Authorize(t, false, -time.Second)
		_, _, err = d.Start(t, nil, nil)
		kit.ExpectReason(t, err, vocab.ReasonRuntimeImageAuthorizationExpired)
		d.Authorize(t, true, 5*time.Minute)
		_, _, err = d.Start(t, nil, nil)
		kit.ExpectReason(t, err, vocab.ReasonRuntimeImageRevoked)
		if st, err := d.N.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: running}); err != nil ||
			st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("revocation stopped a running container: %v %v", err, st)
		}
		if err := d.Host.CloseFence(); err != nil {
			t.Fatal(err)
		}
		d.Authorize(t, false, 5*time.Minute)
		_, _, err = d.Start(t, nil, nil)
		kit.ExpectReason(t, err, vocab.ReasonNodeNotReady)
		_ = d.Host.OpenFence()

		// Every outcome was counted by the shim for the agent's metrics.
		counts := map[string]int64{}
		ls, err := d.Host.Launches()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			counts[l.Outcome+"/"+l.Reason] = l.Count
		}
		for _, k := range []string{"started/none", "refused/RuntimeImageRequired", "refused/RootNotSupported",
			"refused/RuntimeImageRevoked", "refused/LayerPathViolation", "refused/NodeNotReady"} {
			if counts[k] < 1 {
				t.Errorf("launch counter %s = %d; counters %v", k, counts[k], counts)
			}
		}
		// Each start left its duration for the agent's histogram; refusals are not timed.
		durations := d.Host.TakeLaunchDurations()
		if int64(len(durations)) != counts["started/none"] {
			t.Errorf("%d launch durations for %d starts: %v", len(durations), counts["started/none"], durations)
		}
		for _, x := range durations {
			if x <= 0 || x > time.Minute {
				t.Errorf("launch duration %v", x)
			}
		}
	})
}
