package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pelletier/go-toml/v2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/containerd"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// matrixRow is one containerd line starting from one config: its own `containerd config
// default`, or an older line's that a node upgraded in place kept. docs/install.md's
// "containerd versions" table lists the same rows.
type matrixRow struct {
	name    string
	daemon  string // CONTAINERD_MATRIX version, "" for the pinned containerd
	base    string // whose `config default` the node starts from: "" the daemon's own
	version int64  // the config version that gives
	dropIn  bool   // that config imports a drop-in directory
}

var containerdMatrix = []matrixRow{
	{"2.0 default", "v2.0.14", "", 3, false},
	{"2.0 with 1.7 config", "v2.0.14", "v1.7.35", 2, false},
	{"2.1 default", "v2.1.6", "", 3, false},
	{"2.1 with 1.7 config", "v2.1.6", "v1.7.35", 2, false},
	{"2.2 default", "v2.2.9", "", 3, true},
	{"2.2 with 1.7 config", "v2.2.9", "v1.7.35", 2, false},
	{"2.3 default", "v2.3.7", "", 4, true},
	{"2.3 with 2.2 config", "v2.3.7", "v2.2.9", 3, true},
	{"2.4 default", "", "", 4, true},
	{"2.4 with 2.2 config", "", "v2.2.9", 3, true},
	{"2.4 with 1.7 config", "", "v1.7.35", 2, false},
}

// On every containerd line Brewlet supports, from each version's own default config and
// from an older line's config kept over an upgrade, the agent registers the handler in a
// file of the config's own version (a drop-in where the config imports a directory, else
// the main config rewritten), checked by that daemon's `config dump` before any restart;
// does not restart when nothing changed; runs a Brewlet container (created, exec'd into,
// deleted through CRI); restores the config byte for byte on removal; and rolls back a
// handler that fails its health check. Containers on the stock handler survive it all.
func TestContainerdMatrix(t *testing.T) {
	// Daemons before 2.3 and migrated configs would put shim sockets in the machine's
	// /run/containerd/s unless the harness keeps them private: prove it did.
	_, err := os.Stat(machineShimSockets)
	existed := err == nil
	for _, row := range containerdMatrix {
		t.Run(row.name, func(t *testing.T) { matrixCase(t, row) })
	}
	if _, err := os.Stat(machineShimSockets); err == nil && !existed {
		t.Errorf("the matrix created the machine's %s", machineShimSockets)
	}
}

const machineShimSockets = "/run/containerd/s"

func matrixCase(t *testing.T, row matrixRow) {
	n := framework.StartNodeWith(t, framework.NodeOptions{WithoutBrewletHandler: true,
		Containerd: row.daemon, BaseConfig: row.base, DefaultConfig: row.base == "",
		ShimEnv: []string{vocab.EnvSlowLaunch + "=0s"}})
	ctx := context.Background()
	before, err := os.ReadFile(n.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if v := configVersion(t, before); v != row.version {
		t.Fatalf("the node's config has version %d, the row says %d", v, row.version)
	}
	if (n.ImportsDir != "") != row.dropIn {
		t.Fatalf("drop-in directory %q, the row says %v", n.ImportsDir, row.dropIn)
	}
	survivor := startSurvivor(t, n)

	var restarts atomic.Int32
	cd := &containerd.Handler{ConfigPath: n.ConfigPath, Binary: n.ContainerdBinary(), WriteOptions: hoststate.Under(n.HostPrefix).WriteHandlerOptions,
		Restart: func(ctx context.Context) error { restarts.Add(1); return n.RestartContainerd(ctx) },
		Health:  func(ctx context.Context) error { return kit.HandlerListed(ctx, n) }}
	layout := hoststate.Under(n.HostPrefix)
	host := &containerd.HostChanges{Layout: layout, Containerd: cd,
		ShimSource: filepath.Join(n.BinDir, vocab.ShimBinaryName), ShimDir: t.TempDir()}
	if rep := host.Prepare(ctx, vocab.ContainerdRestartValidated); !rep.ContainerdHandlerRegistered || rep.Message != "" {
		t.Fatalf("register the handler: %+v", rep)
	}
	target := n.ConfigPath
	if row.dropIn {
		target = filepath.Join(n.ImportsDir, "99-brewlet.toml")
	}
	written, err := os.ReadFile(target)
	if err != nil {
		t.Fatalf("the handler's file: %v", err)
	}
	if v := configVersion(t, written); v != row.version {
		t.Fatalf("%s written in config version %d on a version %d config:\n%s", target, v, row.version, written)
	}
	if restarts.Load() != 1 {
		t.Fatalf("%d restarts for one registration", restarts.Load())
	}
	if ch, err := cd.Ensure(ctx); err != nil || ch.Restarted || restarts.Load() != 1 {
		t.Fatalf("a second registration restarted containerd or failed: %+v %v", ch, err)
	}

	// A Brewlet container on this containerd: created, exec'd into, deleted.
	d := newDataPathOn(t, n)
	cid, _, err := d.Start(t, nil, func(c *runtimeapi.ContainerConfig) {
		c.Command = []string{"python", "-c", "import time; time.sleep(3600)"}
	})
	if err != nil {
		t.Fatalf("start a Brewlet container: %v", err)
	}
	out, errOut, code, err := n.ExecSync(ctx, cid, "python", "-c", "print(open('/etc/brewlet-runtime-release').read().strip())")
	if err != nil || code != 0 || !strings.Contains(out, "BREWLET_RUNTIME_GENERATION=1") {
		t.Fatalf("exec into the Brewlet container: %v %d %q %q", err, code, out, errOut)
	}
	// Every launch counts as slow here: the shim's log line with the time of each step
	// reaches containerd's log, whichever start protocol the daemon speaks.
	if log, _ := os.ReadFile(n.Containerd.LogPath); !bytes.Contains(log, []byte("brewlet: slow launch")) ||
		!bytes.Contains(log, []byte("validate-app=")) || !bytes.Contains(log, []byte(cid)) {
		t.Errorf("containerd's log has no slow-launch line for %s", cid)
	}
	deletePodOf(t, n, cid)

	// Removal gives containerd back its config byte for byte.
	if notes, err := host.Reverse(ctx); err != nil || notes != "" {
		t.Fatalf("reverse: %q %v", notes, err)
	}
	if after, _ := os.ReadFile(n.ConfigPath); !bytes.Equal(after, before) {
		t.Fatalf("the main config differs after removal:\n%s", after)
	}
	if row.dropIn {
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Fatalf("drop-in left after removal: %v", err)
		}
	}
	if err := kit.HandlerListed(ctx, n); err == nil {
		t.Fatal("handler still listed after removal")
	}

	// A handler that fails its health check is rolled back to the same bytes.
	failing := *cd
	failing.Health = func(context.Context) error { return errors.New("simulated: the handler does not answer") }
	if _, err := failing.Ensure(ctx); vocab.ReasonOf(err) != vocab.ReasonContainerdConfigFailed || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("failed health check: %v", err)
	}
	if after, _ := os.ReadFile(n.ConfigPath); !bytes.Equal(after, before) {
		t.Fatalf("the main config differs after the rollback:\n%s", after)
	}
	if err := kit.HandlerListed(ctx, n); err == nil {
		t.Fatal("handler still listed after the rollback")
	}
	expectSurvived(t, n, survivor, fmt.Sprintf("%d restarts", restarts.Load()))
}

// A containerd Brewlet cannot run on (1.7: no task API v3) is refused with a reason that
// names its version, before the shim or the config is touched.
func TestContainerdUnsupportedRefused(t *testing.T) {
	framework.RequireRoot(t)
	old := framework.Tool(t, framework.ContainerdTool("v1.7.35"))
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.toml")
	out, err := exec.Command(old, "config", "default").Output()
	if err != nil {
		t.Fatal(err)
	}
	def := string(out)
	if err := os.WriteFile(cfgPath, out, 0o644); err != nil {
		t.Fatal(err)
	}
	restarted := false
	cd := &containerd.Handler{ConfigPath: cfgPath, Binary: old,
		Restart: func(context.Context) error { restarted = true; return nil },
		Health:  func(context.Context) error { return nil }}
	shimDir := filepath.Join(dir, "shims")
	if err := os.Mkdir(shimDir, 0o755); err != nil {
		t.Fatal(err)
	}
	host := &containerd.HostChanges{Layout: hoststate.Under(filepath.Join(dir, "host")), Containerd: cd,
		ShimSource: "/bin/busybox", ShimDir: shimDir}
	rep := host.Prepare(context.Background(), vocab.ContainerdRestartValidated)
	if rep.ContainerdHandlerRegistered || rep.ShimInstalled || !strings.Contains(rep.Message, string(vocab.ReasonContainerdUnsupported)+": ") ||
		!strings.Contains(rep.Message, "v1.7.35") {
		t.Fatalf("containerd 1.7: %+v", rep)
	}
	t.Logf("refusal: %s", rep.Message)
	if after, _ := os.ReadFile(cfgPath); string(after) != def {
		t.Fatal("the refused node's config changed")
	}
	if ents, _ := os.ReadDir(shimDir); len(ents) != 0 || restarted {
		t.Fatalf("the refused node changed: shims %v, restarted %v", ents, restarted)
	}
	if owed, err := host.Recorded(); owed || err != nil {
		t.Fatalf("a host change was recorded: %v %v", owed, err)
	}
}

func configVersion(t *testing.T, b []byte) int64 {
	t.Helper()
	var cfg struct {
		Version int64 `toml:"version"`
	}
	if err := toml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg.Version
}

// deletePodOf removes a container and then its pod through CRI.
func deletePodOf(t *testing.T, n *framework.Node, cid string) {
	t.Helper()
	ctx := context.Background()
	list, err := n.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: cid}})
	if err != nil || len(list.Containers) != 1 {
		t.Fatalf("find container %s: %v %v", cid, err, list)
	}
	podID := list.Containers[0].PodSandboxId
	if _, err := n.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cid, Timeout: 5}); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := n.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cid}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := n.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("stop pod: %v", err)
	}
	if _, err := n.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("remove pod: %v", err)
	}
}
