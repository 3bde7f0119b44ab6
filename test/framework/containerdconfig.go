package framework

import (
	"path/filepath"

	"github.com/pelletier/go-toml/v2"

	"brewlet.sh/brewlet/internal/vocab"
)

// containerdConfig renders a containerd config that touches no default path: its own
// root, state, sockets, shim socket directory, runc root, CNI and registry configuration,
// and no NRI socket.
func containerdConfig(n *Node, runc string) ([]byte, error) {
	runcRoot := filepath.Join(n.Dir, "runc")
	handler := func(runtimeType string, podAnnotations []string) map[string]any {
		h := map[string]any{
			"runtime_type": runtimeType,
			"options":      map[string]any{"BinaryName": runc, "Root": runcRoot},
		}
		if podAnnotations != nil {
			h["pod_annotations"] = podAnnotations
		}
		return h
	}
	runtimes := map[string]any{"runc": handler("io.containerd.runc.v2", nil)}
	if !n.opts.WithoutBrewletHandler {
		runtimes[vocab.RuntimeClassName] = handler(vocab.ShimRuntimeType, []string{vocab.PodAnnotationPassthrough})
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
				"env": append([]string{vocab.EnvHostPrefix + "=" + n.HostPrefix, vocab.EnvOnDemandWait + "=20s",
					vocab.EnvDevRoot + "=" + n.DevRoot()}, n.opts.ShimEnv...),
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
	return toml.Marshal(cfg)
}

// DevRoot is the device tree this node's shims scan for groups that own device nodes
// (the node's /dev in production). Tests create device nodes in it; it starts empty.
func (n *Node) DevRoot() string { return filepath.Join(n.Dir, "dev") }
