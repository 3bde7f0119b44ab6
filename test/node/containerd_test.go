package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/containerd"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// startSurvivor starts a container on the stock runc handler that every containerd restart
// of a test must leave running (expectSurvived).
func startSurvivor(t *testing.T, n *framework.Node) string {
	t.Helper()
	ctx := context.Background()
	pod := n.PodConfig("survivor", nil)
	podID, err := n.RunPod(ctx, pod, "runc")
	if err != nil {
		t.Fatal(err)
	}
	id, err := n.CreateStart(ctx, podID, pod, framework.ContainerConfig("c", n.BusyboxImage, "sleep", "3600"))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func expectSurvived(t *testing.T, n *framework.Node, id, what string) {
	t.Helper()
	st, err := n.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("the runc container did not survive %s: %v %v", what, err, st)
	}
}

// The provisioner registers the brewlet handler through containerd's drop-in directory,
// checks it with containerd's own parser, restarts containerd only on a change, health-
// checks the handler through CRI, rolls back on failure, and removes it again on cleanup;
// running containers survive every restart.
func TestContainerdHandlerRegistration(t *testing.T) {
	n := framework.StartNodeWith(t, framework.NodeOptions{WithoutBrewletHandler: true, ImportsDir: true})
	ctx := context.Background()
	survivor := startSurvivor(t, n)
	if _, err := n.RunPod(ctx, n.PodConfig("before", nil), "brewlet"); err == nil {
		t.Fatal("brewlet handler usable before registration")
	}
	cd := &containerd.Handler{
		ConfigPath: n.ConfigPath, Binary: framework.Tool(t, "containerd"), WriteOptions: hoststate.Under(n.HostPrefix).WriteHandlerOptions,
		Restart: n.RestartContainerd,
		Health:  func(ctx context.Context) error { return kit.HandlerListed(ctx, n) },
	}
	// containerdRestart: none changes nothing at all.
	before, _ := os.ReadFile(n.ConfigPath)
	host := &containerd.HostChanges{Layout: hoststate.Under(t.TempDir()), Containerd: cd}
	if rep := host.Prepare(ctx, vocab.ContainerdRestartNone); rep.ContainerdHandlerRegistered || rep.Message != "" {
		t.Fatalf("mode none: %+v", rep)
	}
	if after, _ := os.ReadFile(n.ConfigPath); string(after) != string(before) {
		t.Fatal("mode none changed containerd's config")
	}
	if ents, _ := os.ReadDir(n.ImportsDir); len(ents) != 0 {
		t.Fatalf("mode none wrote a drop-in: %v", ents)
	}
	// Mode validated installs the shim and registers the handler, and says so.
	shimDir := t.TempDir()
	host.ShimSource, host.ShimDir = filepath.Join(n.BinDir, vocab.ShimBinaryName), shimDir
	rep := host.Prepare(ctx, vocab.ContainerdRestartValidated)
	if !rep.ContainerdHandlerRegistered || !rep.ShimInstalled || rep.Message != "" {
		t.Fatalf("register handler: %+v", rep)
	}
	if _, err := os.Stat(filepath.Join(n.ImportsDir, "99-brewlet.toml")); err != nil {
		t.Fatalf("drop-in: %v", err)
	}
	if _, err := n.RunPod(ctx, n.PodConfig("after", nil), "brewlet"); err != nil {
		t.Fatalf("brewlet handler not usable after registration: %v", err)
	}
	if ch, err := cd.Ensure(ctx); err != nil || ch.Restarted {
		t.Fatalf("second Ensure restarted containerd or failed: %+v %v", ch, err)
	}

	// Cleanup reverses both: no drop-in, no shim, the main config as it was, the record gone.
	if notes, err := host.Reverse(ctx); err != nil || notes != "" {
		t.Fatalf("reverse: %q %v", notes, err)
	}
	if _, err := os.Stat(filepath.Join(n.ImportsDir, "99-brewlet.toml")); !os.IsNotExist(err) {
		t.Fatalf("drop-in left after removal: %v", err)
	}
	if _, err := os.Stat(filepath.Join(shimDir, vocab.ShimBinaryName)); !os.IsNotExist(err) {
		t.Fatalf("shim left after cleanup: %v", err)
	}
	if after, _ := os.ReadFile(n.ConfigPath); string(after) != string(before) {
		t.Fatal("cleanup changed containerd's main config")
	}
	if owed, err := host.Recorded(); owed || err != nil {
		t.Fatalf("host record after cleanup: %v %v", owed, err)
	}
	if err := kit.HandlerListed(ctx, n); err == nil {
		t.Fatal("handler still listed after cleanup")
	}
	host.ShimDir = ""

	// A handler that fails its health check is rolled back, and containerd runs on.
	failing := *cd
	failing.Health = func(context.Context) error { return errors.New("simulated: handler does not answer") }
	_, err := failing.Ensure(ctx)
	if vocab.ReasonOf(err) != vocab.ReasonContainerdConfigFailed || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("failed health check: %v", err)
	}
	// The same failure through Prepare is reported for NodeRuntime status.
	failingHost := &containerd.HostChanges{Layout: hoststate.Under(t.TempDir()), Containerd: &failing}
	if rep := failingHost.Prepare(ctx, vocab.ContainerdRestartValidated); rep.ContainerdHandlerRegistered ||
		!strings.Contains(rep.Message, "ContainerdConfigFailed") {
		t.Fatalf("failure report: %+v", rep)
	}
	if _, err := os.Stat(filepath.Join(n.ImportsDir, "99-brewlet.toml")); !os.IsNotExist(err) {
		t.Fatalf("drop-in not rolled back: %v", err)
	}
	if err := kit.HandlerListed(ctx, n); err == nil {
		t.Fatal("handler still listed after rollback")
	}
	expectSurvived(t, n, survivor, "the restarts")

	t.Run("main config without imports is rewritten with a TOML library", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "config.toml")
		orig := "version = 3\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n  runtime_type = 'io.containerd.runc.v2'\n  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n    SystemdCgroup = true\n"
		if err := os.WriteFile(cfg, []byte(orig), 0o644); err != nil {
			t.Fatal(err)
		}
		restarts := 0
		c := &containerd.Handler{ConfigPath: cfg, Binary: framework.Tool(t, "containerd"),
			Restart: func(context.Context) error { restarts++; return nil },
			Health:  func(context.Context) error { return nil }}
		if _, err := c.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(cfg)
		if !strings.Contains(string(b), vocab.ShimRuntimeType) || !strings.Contains(string(b), "SystemdCgroup = true") || restarts != 1 {
			t.Fatalf("rewritten config (restarts %d):\n%s", restarts, b)
		}
		if _, err := c.Remove(ctx); err != nil {
			t.Fatal(err)
		}
		b, _ = os.ReadFile(cfg)
		if strings.Contains(string(b), vocab.ShimRuntimeType) || restarts != 2 {
			t.Fatalf("handler not removed (restarts %d):\n%s", restarts, b)
		}
		// Through the host record, cleanup restores the original bytes (comments and
		// layout included), not a re-encoded equivalent, and keeps the file's mode.
		if err := os.WriteFile(cfg, []byte(orig+"# the administrator's comment\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		original, _ := os.ReadFile(cfg)
		h := &containerd.HostChanges{Layout: hoststate.Under(t.TempDir()), Containerd: c}
		if rep := h.Prepare(ctx, vocab.ContainerdRestartValidated); !rep.ContainerdHandlerRegistered {
			t.Fatalf("prepare: %+v", rep)
		}
		if b, _ := os.ReadFile(cfg); !strings.Contains(string(b), vocab.ShimRuntimeType) {
			t.Fatalf("handler not registered:\n%s", b)
		}
		if _, err := h.Reverse(ctx); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(cfg); string(b) != string(original) {
			t.Fatalf("config after cleanup is not the original:\n%s\nwant:\n%s", b, original)
		}
		if fi, _ := os.Stat(cfg); fi.Mode().Perm() != 0o600 {
			t.Fatalf("config mode %v after cleanup", fi.Mode())
		}
		// An administrator's edit after Brewlet's is never overwritten: the handler is taken
		// out, the edit kept, and the difference reported.
		if rep := h.Prepare(ctx, vocab.ContainerdRestartValidated); !rep.ContainerdHandlerRegistered {
			t.Fatalf("prepare again: %+v", rep)
		}
		edited, _ := os.ReadFile(cfg)
		if err := os.WriteFile(cfg, append(edited, []byte("# edited later\n")...), 0o600); err != nil {
			t.Fatal(err)
		}
		notes, err := h.Reverse(ctx)
		if err != nil || !strings.Contains(notes, "changed after Brewlet's edit") {
			t.Fatalf("reverse over an edit: %q %v", notes, err)
		}
		if b, _ := os.ReadFile(cfg); strings.Contains(string(b), vocab.ShimRuntimeType) || !strings.Contains(string(b), "SystemdCgroup") {
			t.Fatalf("config after cleanup over an edit:\n%s", b)
		}
		// A config containerd itself refuses is never touched.
		bad := "version = 3\n[plugins\n"
		if err := os.WriteFile(cfg, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Ensure(ctx); vocab.ReasonOf(err) != vocab.ReasonContainerdConfigFailed {
			t.Fatalf("broken config: %v", err)
		}
		if b, _ := os.ReadFile(cfg); string(b) != bad {
			t.Fatal("a broken config was modified")
		}
		// A version 1 config (no version key) is one Brewlet does not edit: it says how to
		// migrate it, and changes nothing.
		v1 := "[plugins.cri.containerd]\n  snapshotter = 'overlayfs'\n"
		if err := os.WriteFile(cfg, []byte(v1), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Ensure(ctx); vocab.ReasonOf(err) != vocab.ReasonContainerdConfigFailed || !strings.Contains(err.Error(), "containerd config migrate") {
			t.Fatalf("version 1 config: %v", err)
		}
		if b, _ := os.ReadFile(cfg); string(b) != v1 {
			t.Fatal("a version 1 config was modified")
		}
	})
}

// The brewlet handler runs runc itself: a handler whose BinaryName is a wrapper runtime (one
// that could add hooks, devices or mounts after the shim's checks) is refused at the first
// task with ContainerdConfigFailed naming it, and the wrapper never runs.
func TestHandlerRefusesAWrapperRuntime(t *testing.T) {
	n := framework.StartNodeWith(t, framework.NodeOptions{WithoutBrewletHandler: true, ImportsDir: true})
	ctx := context.Background()
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	wrapper := filepath.Join(dir, "container-runtime-wrapper")
	script := "#!/bin/sh\necho \"$@\" >> " + ran + "\nexec " + framework.Tool(t, "runc") + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dropIn := fmt.Sprintf(`version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.brewlet]
runtime_type = %q
pod_annotations = [%q]
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.brewlet.options]
BinaryName = %q
Root = %q
`, vocab.ShimRuntimeType, vocab.PodAnnotationPassthrough, wrapper, filepath.Join(n.Dir, "runc"))
	if err := os.WriteFile(filepath.Join(n.ImportsDir, "50-wrapper.toml"), []byte(dropIn), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.RestartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := n.RunPod(ctx, n.PodConfig("wrapped", nil), "brewlet")
	if err == nil || !strings.Contains(err.Error(), string(vocab.ReasonContainerdConfigFailed)) || !strings.Contains(err.Error(), wrapper) {
		t.Fatalf("a pod on a handler whose BinaryName is a wrapper: %v; want ContainerdConfigFailed naming it", err)
	}
	if b, _ := os.ReadFile(ran); len(b) != 0 {
		t.Fatalf("the wrapper ran: %s", b)
	}
}
