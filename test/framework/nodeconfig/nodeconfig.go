// Package nodeconfig renders the containerd configs of harness nodes: the harness's own,
// which touches no default path, and one laid over any containerd line's `config default`
// (the containerd matrix).
package nodeconfig

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// Node is what a config needs to know of its node.
type Node struct {
	Dir, Socket, HostPrefix, PauseImage, DevRoot string

	Runc     string   // the runc binary
	ToolsBin string   // the tools cache's bin directory
	Daemon   string   // the daemon's tool name (Tool)
	Version  string   // its CONTAINERD_MATRIX version ("" the pinned one)
	ShimEnv  []string // more environment for shims
	// WithoutBrewletHandler leaves the brewlet handler out.
	WithoutBrewletHandler bool
	// AgentHandler writes the handler as the agent does: no options table (HandlerOptions
	// writes runc's options where the shim reads them).
	AgentHandler bool
	// ImportsDir is the drop-in directory the harness's config imports ("" none).
	ImportsDir string
}

func (n Node) shimEnv() []string {
	return append([]string{vocab.EnvHostPrefix + "=" + n.HostPrefix, vocab.EnvOnDemandWait + "=20s", vocab.EnvDevRoot + "=" + n.DevRoot}, n.ShimEnv...)
}

// runcOptions are the options the harness runs runc with: its binary, a private root.
func (n Node) runcOptions() map[string]any {
	return map[string]any{"BinaryName": n.Runc, "Root": filepath.Join(n.Dir, "runc")}
}

// brewletHandler is the handler as the agent registers it (no options table: the shim reads
// the runc options from the file HandlerOptions writes), or else with runc's options as a
// table, as a handler written by hand may be (it runs no user-namespaced pods).
func (n Node) brewletHandler() map[string]any {
	h := map[string]any{"runtime_type": vocab.ShimRuntimeType, "pod_annotations": []string{vocab.PodAnnotationPassthrough}}
	if !n.AgentHandler {
		h["options"] = n.runcOptions()
	}
	return h
}

// HandlerOptions writes the runc options the shim runs the harness's runc with (its binary,
// its private root) into the layout at host (the node's, as the test process sees it), where
// the agent writes the node's runc handler's options.
func HandlerOptions(n Node, host hoststate.Layout) error {
	b, err := toml.Marshal(n.runcOptions())
	if err != nil {
		return err
	}
	return host.WriteHandlerOptions(b)
}

// Harness renders a containerd config that touches no default path: its own
// root, state, sockets, shim socket directory, runc root, CNI and registry configuration,
// and no NRI socket.
func Harness(n Node) ([]byte, error) {
	runtimes := map[string]any{"runc": map[string]any{
		"runtime_type": "io.containerd.runc.v2",
		"options":      n.runcOptions(),
	}}
	if !n.WithoutBrewletHandler {
		runtimes[vocab.RuntimeClassName] = n.brewletHandler()
	}
	imports := []string{}
	if n.ImportsDir != "" {
		imports = append(imports, n.ImportsDir+"/*.toml")
	}
	cfg := map[string]any{
		"version": 3,
		"root":    filepath.Join(n.Dir, "root"),
		"state":   filepath.Join(n.Dir, "state"),
		"imports": imports,
		"grpc":    map[string]any{"address": n.Socket},
		"ttrpc":   map[string]any{"address": n.Socket + ".ttrpc"},
		"plugins": map[string]any{
			"io.containerd.shim.v1.manager": map[string]any{
				"socket_dir": filepath.Join(n.Dir, "s"),
				// The shim finds the node's Brewlet state under the instance directory, and
				// scans a device tree the test controls for device-owning groups.
				"env": n.shimEnv(),
			},
			"io.containerd.nri.v1.nri":      map[string]any{"disable": true},
			"io.containerd.internal.v1.opt": map[string]any{"path": filepath.Join(n.Dir, "opt")},
			"io.containerd.cri.v1.images": map[string]any{
				"snapshotter":   "overlayfs",
				"pinned_images": map[string]any{"sandbox": n.PauseImage},
				"registry":      map[string]any{"config_path": filepath.Join(n.Dir, "certs.d")},
			},
			"io.containerd.cri.v1.runtime": map[string]any{
				// No CAP_SYS_RESOURCE on this machine type: runc cannot set the pause
				// container's negative oom_score_adj.
				"restrict_oom_score_adj":       true,
				"netns_mounts_under_state_dir": true,
				"containerd": map[string]any{
					"default_runtime_name": "runc",
					"runtimes":             runtimes,
				},
				"cni": map[string]any{
					"bin_dirs": []string{"/usr/lib/cni"},
					"conf_dir": filepath.Join(n.Dir, "cni"),
				},
			},
		},
	}
	// For profiling by hand: containerd's and the shims' debug logs (they slow every
	// container operation down several times, so never for a recorded benchmark).
	if os.Getenv("BREWLET_CONTAINERD_DEBUG") != "" {
		cfg["debug"] = map[string]any{"level": "debug"}
	}
	return toml.Marshal(cfg)
}

// A node of the containerd matrix runs another containerd line's daemon, built by
// hack/tools.sh from CONTAINERD_MATRIX as containerd-<version>, and may start from that
// daemon's own `containerd config default` (or an older line's, as a node upgraded in place
// keeps it) instead of the harness's config. Only what this machine and isolation need is
// laid over the default, in the schema of the default's own config version: every path the
// daemon would share with the machine (root, state, sockets, CNI, CDI, NRI, opt), the
// sandbox image, the registry hosts and the runc binary.

// Tool is the tools-cache name of a containerd daemon: "" is the pinned one.
func Tool(version string) string {
	if version == "" {
		return "containerd"
	}
	return "containerd-" + version
}

// lineOf returns major and minor of a tool name such as containerd-v2.0.14 (the pinned
// containerd is the newest line the harness knows).
func lineOf(tool string) (int, int) {
	v := strings.TrimPrefix(strings.TrimPrefix(tool, "containerd-"), "v")
	parts := strings.Split(v, ".")
	if tool == "containerd" || len(parts) < 2 {
		return 99, 0
	}
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(parts[1])
	return major, minor
}

// ShimAPI23: containerd 2.3 changed how shims are started (bootstrap parameters on stdin)
// and made their socket directory configurable. Older daemons put shim sockets in
// /run/containerd/s, so the harness gives them a /run of their own (runContainerd), and
// need a runc shim of their own line.
func ShimAPI23(tool string) bool {
	major, minor := lineOf(tool)
	return major > 2 || major == 2 && minor >= 3
}

// FromDefault renders the node's config from `<base> config default`, and the drop-in
// directory it made where the default imports one.
func FromDefault(n Node, base string) ([]byte, string, error) {
	out, err := exec.Command(filepath.Join(n.ToolsBin, base), "config", "default").Output()
	if err != nil {
		return nil, "", fmt.Errorf("%s config default: %v", base, err)
	}
	var cfg map[string]any
	if err := toml.Unmarshal(out, &cfg); err != nil {
		return nil, "", fmt.Errorf("%s config default is not TOML: %v", base, err)
	}
	version, _ := cfg["version"].(int64)
	set := func(value any, path ...string) {
		cur := cfg
		for _, k := range path[:len(path)-1] {
			next, ok := cur[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				cur[k] = next
			}
			cur = next
		}
		cur[path[len(path)-1]] = value
	}
	set(filepath.Join(n.Dir, "root"), "root")
	set(filepath.Join(n.Dir, "state"), "state")
	// A default that imports a drop-in directory gets one of the node's own.
	if imports, _ := cfg["imports"].([]any); len(imports) > 0 {
		imports := filepath.Join(n.Dir, "conf.d")
		if err := os.MkdirAll(imports, 0o755); err != nil {
			return nil, "", err
		}
		n.ImportsDir = imports
		cfg["imports"] = []string{imports + "/*.toml"}
	}
	if version >= 4 {
		set(n.Socket, "plugins", "io.containerd.server.v1.grpc", "address")
		set(n.Socket+".ttrpc", "plugins", "io.containerd.server.v1.ttrpc", "address")
	} else {
		set(n.Socket, "grpc", "address")
		set(n.Socket+".ttrpc", "ttrpc", "address")
	}
	set(n.shimEnv(), "plugins", "io.containerd.shim.v1.manager", "env")
	if ShimAPI23(n.Daemon) {
		set(filepath.Join(n.Dir, "s"), "plugins", "io.containerd.shim.v1.manager", "socket_dir")
	}
	set(true, "plugins", "io.containerd.nri.v1.nri", "disable")
	set(filepath.Join(n.Dir, "opt"), "plugins", "io.containerd.internal.v1.opt", "path")
	set(filepath.Join(n.Dir, "image-verifier"), "plugins", "io.containerd.image-verifier.v1.bindir", "bin_dir")
	cdi := []string{filepath.Join(n.Dir, "cdi")}
	cri := []string{"plugins", "io.containerd.cri.v1.runtime"}
	if version < 4 {
		// Migrating this table (from versions 2 and 3, on 2.3 and later also from 3)
		// replaces the shim manager's settings, the shims' environment with them; the
		// harness's shims need theirs (a real node's use the default paths).
		delete(tableAt(cfg, "plugins"), "io.containerd.runtime.v2.task")
	}
	if version == 2 {
		cri = []string{"plugins", "io.containerd.grpc.v1.cri"}
		set(n.PauseImage, append(cri, "sandbox_image")...)
		set(filepath.Join(n.Dir, "certs.d"), append(cri, "registry", "config_path")...)
		set("overlayfs", append(cri, "containerd", "snapshotter")...)
	} else {
		images := []string{"plugins", "io.containerd.cri.v1.images"}
		set(n.PauseImage, append(images, "pinned_images", "sandbox")...)
		set(filepath.Join(n.Dir, "certs.d"), append(images, "registry", "config_path")...)
		set("overlayfs", append(images, "snapshotter")...)
	}
	// 2.1 made the plugin directory a list (bin_dirs); older layouts have one bin_dir.
	if cni := tableAt(cfg, append(cri, "cni")...); cni != nil && cni["bin_dirs"] != nil {
		set([]string{"/usr/lib/cni"}, append(cri, "cni", "bin_dirs")...)
	} else {
		set("/usr/lib/cni", append(cri, "cni", "bin_dir")...)
	}
	set(filepath.Join(n.Dir, "cni"), append(cri, "cni", "conf_dir")...)
	// No CAP_SYS_RESOURCE on this machine type (see Harness).
	set(true, append(cri, "restrict_oom_score_adj")...)
	set(true, append(cri, "netns_mounts_under_state_dir")...)
	set(cdi, append(cri, "cdi_spec_dirs")...)
	set("runc", append(cri, "containerd", "default_runtime_name")...)
	runtimes := append(cri, "containerd", "runtimes")
	set("io.containerd.runc.v2", append(runtimes, "runc", "runtime_type")...)
	set(n.Runc, append(runtimes, "runc", "options", "BinaryName")...)
	set(filepath.Join(n.Dir, "runc"), append(runtimes, "runc", "options", "Root")...)
	if !ShimAPI23(n.Daemon) {
		// The pinned runc shim speaks only 2.3's start protocol; older daemons get their own.
		set(filepath.Join(n.ToolsBin, "containerd-shim-runc-v2-"+n.Version), append(runtimes, "runc", "runtime_path")...)
	}
	if !n.WithoutBrewletHandler {
		set(n.brewletHandler(), append(runtimes, vocab.RuntimeClassName)...)
	}
	out, err = toml.Marshal(cfg)
	return out, n.ImportsDir, err
}

func tableAt(cfg map[string]any, path ...string) map[string]any {
	cur := cfg
	for _, k := range path {
		next, ok := cur[k].(map[string]any)
		if !ok {
			return nil
		}
		cur = next
	}
	return cur
}
