package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/provisioner"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
)

func handlerListed(ctx context.Context, n *framework.Node) error {
	st, err := n.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	for _, h := range st.RuntimeHandlers {
		if h.Name == vocab.RuntimeClassName {
			return nil
		}
	}
	return errors.New("CRI does not list the brewlet runtime handler")
}

// The provisioner registers the brewlet handler through containerd's drop-in directory,
// checks it with containerd's own parser, restarts containerd only on a change, health-
// checks the handler through CRI, rolls back on failure, and removes it again on cleanup;
// running containers survive every restart.
func TestContainerdHandlerRegistration(t *testing.T) {
	n := framework.StartNodeWith(t, framework.NodeOptions{WithoutBrewletHandler: true, ImportsDir: true})
	ctx := context.Background()
	pod := n.PodConfig("survivor", nil)
	podID, err := n.RunPod(ctx, pod, "runc")
	if err != nil {
		t.Fatal(err)
	}
	survivor, err := n.CreateStart(ctx, podID, pod, framework.ContainerConfig("c", n.BusyboxImage, "sleep", "3600"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.RunPod(ctx, n.PodConfig("before", nil), "brewlet"); err == nil {
		t.Fatal("brewlet handler usable before registration")
	}
	cd := &provisioner.Containerd{
		ConfigPath: n.ConfigPath, Binary: framework.Tool(t, "containerd"),
		Restart: n.RestartContainerd,
		Health:  func(ctx context.Context) error { return handlerListed(ctx, n) },
	}
	// containerdRestart: none changes nothing at all.
	before, _ := os.ReadFile(n.ConfigPath)
	if rep := provisioner.PrepareHost(ctx, cd, vocab.ContainerdRestartNone, "", ""); rep.ContainerdHandlerRegistered || rep.Message != "" {
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
	rep := provisioner.PrepareHost(ctx, cd, vocab.ContainerdRestartValidated, filepath.Join(n.BinDir, vocab.ShimBinaryName), shimDir)
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

	if ch, err := cd.Remove(ctx); err != nil || !ch.Restarted {
		t.Fatalf("remove handler: %+v %v", ch, err)
	}
	if _, err := os.Stat(filepath.Join(n.ImportsDir, "99-brewlet.toml")); !os.IsNotExist(err) {
		t.Fatalf("drop-in left after removal: %v", err)
	}

	// A handler that fails its health check is rolled back, and containerd runs on.
	failing := *cd
	failing.Health = func(context.Context) error { return errors.New("simulated: handler does not answer") }
	_, err = failing.Ensure(ctx)
	if vocab.ReasonOf(err) != vocab.ReasonContainerdConfigFailed || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("failed health check: %v", err)
	}
	// The same failure through PrepareHost is reported for NodeRuntime status.
	if rep := provisioner.PrepareHost(ctx, &failing, vocab.ContainerdRestartValidated, "", ""); rep.ContainerdHandlerRegistered ||
		!strings.Contains(rep.Message, "ContainerdConfigFailed") {
		t.Fatalf("failure report: %+v", rep)
	}
	if _, err := os.Stat(filepath.Join(n.ImportsDir, "99-brewlet.toml")); !os.IsNotExist(err) {
		t.Fatalf("drop-in not rolled back: %v", err)
	}
	if err := handlerListed(ctx, n); err == nil {
		t.Fatal("handler still listed after rollback")
	}
	st, err := n.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: survivor})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("running container did not survive the restarts: %v %v", err, st)
	}

	t.Run("main config without imports is rewritten with a TOML library", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "config.toml")
		orig := "version = 3\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n  runtime_type = 'io.containerd.runc.v2'\n  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n    SystemdCgroup = true\n"
		if err := os.WriteFile(cfg, []byte(orig), 0o644); err != nil {
			t.Fatal(err)
		}
		restarts := 0
		c := &provisioner.Containerd{ConfigPath: cfg, Binary: framework.Tool(t, "containerd"),
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
	})
}
