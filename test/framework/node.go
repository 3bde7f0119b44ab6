package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework/nodeconfig"
	"brewlet.sh/brewlet/test/framework/testimage"
)

// Node is a real container node: containerd with its CRI plugin, runc, a loopback OCI
// registry and a private CNI bridge. It offers the stock "runc" handler and the "brewlet"
// handler served by the shim built from this repository.
type Node struct {
	*Instance
	Registry     string // host:port of the loopback registry
	Socket       string // containerd's gRPC socket
	CgroupParent string // private cgroup parent of every pod
	Bridge       string
	Subnet       string
	BinDir       string // shim, pause; first on containerd's PATH
	ConfigPath   string
	Containerd   *Process
	RegistryProc *Process
	Runtime      runtimeapi.RuntimeServiceClient
	Images       runtimeapi.ImageServiceClient
	// RegistryAccess is the registry's CA and credentials: it serves TLS with a CA in no
	// system store and requires a password of the node's own, as production registries do.
	// containerd trusts it through the node's hosts.toml; the sandbox image is pulled with
	// the credentials at start (containerd itself has none), other images by their pullers
	// (the kubelet's credential provider, Pull).
	RegistryAccess *RegistryAccess
	PauseImage     string // repo@digest in the registry
	BusyboxImage   string
	ImportsDir     string   // drop-in directory, when NodeOptions.ImportsDir
	HostPrefix     string   // root of the node's Brewlet host layout (hoststate.Under)
	net            *nodeNet // with NodeOptions.OwnNetwork
	// Seen are the node's paths as its containerd, shims, kubelet and pods see them: the
	// same as the fields above unless NodeOptions.View relocates them.
	Seen     NodePaths
	conn     *grpc.ClientConn
	opts     NodeOptions
	restarts atomic.Int64 // by ServeRestarts
	bridgeUp bool         // created before containerd (a registry listens on its gateway)
}

// NodeOptions vary the node's containerd configuration.
type NodeOptions struct {
	// WithoutBrewletHandler leaves the brewlet handler out, for tests of its registration.
	WithoutBrewletHandler bool
	// AgentHandler registers the handler as the agent does (no options table; runc's
	// options in the file the shim reads), which user-namespaced pods need. Otherwise the
	// handler carries runc's options as a table, as one written by hand may.
	AgentHandler bool
	// ImportsDir makes the main config import <dir>/*.toml (a drop-in directory).
	ImportsDir bool
	// HostReachable connects pods and host: the bridge is created up front holding the
	// subnet's first address, and pods get a default route through it. Pods then reach the
	// host's own addresses (an API server on the node IP) and the host reaches pods
	// (probes, webhooks, the API server's service proxy). Nothing is forwarded or
	// translated: IP forwarding stays as the host has it (the bridge plugin's isGateway
	// would switch it on host-wide).
	HostReachable bool
	// Containerd runs another containerd line's daemon, by version (a CONTAINERD_MATRIX
	// entry of hack/versions.env, e.g. "v2.0.14"); "" runs the pinned one.
	Containerd string
	// BaseConfig starts the node's config from `containerd config default` of another
	// version's daemon (a node upgraded in place keeps its old config), instead of the
	// harness's own config (nodeconfig).
	BaseConfig string
	// DefaultConfig starts the config from the daemon's own default (BaseConfig empty).
	DefaultConfig bool
	// ShimEnv is added to the environment containerd gives shims (e.g. BREWLET_SLOW_LAUNCH).
	ShimEnv []string
	// OwnNetwork (with HostReachable) runs the node in a network namespace of its own,
	// linked to the machine (see nodeNet); its registry listens on HostAddr.
	OwnNetwork bool
	// View is a directory every node of a multi-node cluster names alike. The node's
	// containerd (with its shims and pods) and its kubelet run in mount namespaces that bind
	// the node's host layout, containerd config directory and socket directory there
	// (viewBinds), so that each node has its own state at the same paths, as separate
	// machines would, and one chart (one hostPrefix, one config and socket path) serves
	// them all. "" leaves the paths as they are.
	View string
}

// NodePaths are where a node's Brewlet host layout, containerd config and socket are.
type NodePaths struct {
	HostPrefix, ConfigPath, Socket string
}

// StartNode starts a node with both handlers. It is removed (pods, shims, mounts, bridge,
// cgroups, files) when the test ends.
func StartNode(t TB) *Node { return StartNodeWith(t, NodeOptions{}) }

// StartNodeWith starts a node with options.
func StartNodeWith(t TB, opts NodeOptions) *Node {
	t.Helper()
	RequireRoot(t)
	for _, tool := range []string{ContainerdTool(opts.Containerd), "containerd-shim-runc-v2", "runc", "registry", "crictl"} {
		Tool(t, tool)
	}
	if opts.BaseConfig != "" {
		Tool(t, ContainerdTool(opts.BaseConfig))
	}
	for _, f := range []string{"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback", "/bin/busybox"} {
		if _, err := os.Stat(f); err != nil {
			Unavailable(t, "%s missing (Debian packages containernetworking-plugins, busybox-static; run hack/tools.sh debs)", f)
		}
	}
	in := NewInstance(t, "n")
	n := &Node{Instance: in, opts: opts, HostPrefix: filepath.Join(in.Dir, "host"), BinDir: filepath.Join(in.Dir, "bin"), Socket: filepath.Join(in.Dir, "containerd-run", "containerd.sock"),
		CgroupParent: "brewlet-e2e-" + in.ID, Bridge: "brw" + in.ID}
	n.ConfigPath = filepath.Join(n.Dir, "containerd-conf", "config.toml")
	n.Seen = NodePaths{HostPrefix: n.HostPrefix, ConfigPath: n.ConfigPath, Socket: n.Socket}
	if opts.View != "" {
		n.Seen = NodePaths{HostPrefix: filepath.Join(opts.View, "host"), ConfigPath: filepath.Join(opts.View, "containerd-conf", "config.toml"),
			Socket: filepath.Join(opts.View, "containerd-run", "containerd.sock")}
	}
	subnet, err := freeSubnet()
	if err != nil {
		t.Fatal(err)
	}
	n.Subnet = subnet
	// Record host resources before anything can create them.
	in.Update(func(r *Resources) { r.Bridge, r.CgroupParent = n.Bridge, n.CgroupParent })
	steps := []struct {
		name string
		fn   func(TB) error
	}{
		{"build shim and pause", n.buildBinaries},
		{"network namespace", n.createNetwork},
		{"start registry", n.startRegistry},
		{"push base images", n.pushBaseImages},
		{"start containerd", n.startContainerd},
		{"pull the sandbox image", n.pullSandbox},
	}
	for _, s := range steps {
		if err := s.fn(t); err != nil {
			t.Fatalf("node %s: %s: %v", in.ID, s.name, err)
		}
	}
	in.OnCleanup(n.removePods)
	return n
}

func (n *Node) buildBinaries(t TB) error {
	root := RepoRoot(t)
	for _, b := range []struct{ pkg, env string }{
		{"./cmd/" + vocab.ShimBinaryName, ""},
		{"./test/pause", "CGO_ENABLED=0"},
	} {
		if pre := Prebuilt(filepath.Base(b.pkg)); pre != "" {
			if err := copyFile(pre, filepath.Join(n.BinDir, filepath.Base(b.pkg)), 0o755); err != nil {
				return err
			}
			continue
		}
		cmd := exec.Command("go", "build", "-o", n.BinDir+"/", b.pkg)
		cmd.Dir = root
		cmd.Env = os.Environ()
		if b.env != "" {
			cmd.Env = append(cmd.Env, b.env)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return nil
}

func (n *Node) pushBaseImages(TB) error {
	pause, err := os.ReadFile(filepath.Join(n.BinDir, "pause"))
	if err != nil {
		return err
	}
	pl, err := testimage.LayerTar([]testimage.TarEntry{{Name: "pause", Mode: 0o755, Body: pause}})
	if err != nil {
		return err
	}
	img, err := testimage.Image(v1.Config{Entrypoint: []string{"/pause"}}, pl)
	if err != nil {
		return err
	}
	if n.PauseImage, err = testimage.Push(img, n.Registry+"/e2e/pause:1", n.RegistryAccess.Options()...); err != nil {
		return err
	}
	bl, err := testimage.BusyboxLayer()
	if err != nil {
		return err
	}
	img, err = testimage.Image(v1.Config{Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}}, bl)
	if err != nil {
		return err
	}
	n.BusyboxImage, err = testimage.Push(img, n.Registry+"/e2e/busybox:1", n.RegistryAccess.Options()...)
	return err
}

func (n *Node) startContainerd(t TB) error {
	if n.opts.HostReachable && n.net == nil && !n.bridgeUp {
		if err := n.createBridge(); err != nil {
			return err
		}
	}
	if err := n.writeCNIConfig(); err != nil {
		return err
	}
	if err := n.writeRegistryHosts(); err != nil {
		return err
	}
	// Config and socket in directories of their own: a node agent pod mounts each directory.
	for _, d := range []string{filepath.Dir(n.ConfigPath), filepath.Dir(n.Socket)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if n.opts.ImportsDir {
		n.ImportsDir = filepath.Join(n.Dir, "conf.d")
		if err := os.MkdirAll(n.ImportsDir, 0o755); err != nil {
			return err
		}
	}
	var cfg []byte
	var err error
	nc := nodeconfig.Node{Dir: n.Dir, Socket: n.Socket, HostPrefix: n.Seen.HostPrefix, PauseImage: n.PauseImage, DevRoot: n.DevRoot(),
		Runc: Tool(t, "runc"), ToolsBin: ToolsBin(), Daemon: n.containerdTool(), Version: n.opts.Containerd,
		ShimEnv: n.opts.ShimEnv, WithoutBrewletHandler: n.opts.WithoutBrewletHandler, AgentHandler: n.opts.AgentHandler, ImportsDir: n.ImportsDir}
	switch {
	case n.opts.BaseConfig != "":
		cfg, n.ImportsDir, err = nodeconfig.FromDefault(nc, ContainerdTool(n.opts.BaseConfig))
	case n.opts.DefaultConfig:
		cfg, n.ImportsDir, err = nodeconfig.FromDefault(nc, n.containerdTool())
	default:
		cfg, err = nodeconfig.Harness(nc)
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.ConfigPath, cfg, 0o644); err != nil {
		return err
	}
	if n.opts.AgentHandler && !n.opts.WithoutBrewletHandler {
		if err := nodeconfig.HandlerOptions(nc, hoststate.Under(n.HostPrefix)); err != nil {
			return err
		}
	}
	if err := n.runContainerd(); err != nil {
		return err
	}
	n.conn, err = grpc.NewClient("unix://"+n.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	n.OnCleanup(func() { _ = n.conn.Close() })
	n.Runtime = runtimeapi.NewRuntimeServiceClient(n.conn)
	n.Images = runtimeapi.NewImageServiceClient(n.conn)
	return n.waitCRI()
}

// pullSandbox pulls the pinned sandbox image with the registry's credentials: containerd
// pulls it by itself when a pod starts, and has none (as on nodes whose registry needs
// them; their images come pre-loaded or from a registry containerd is configured for).
func (n *Node) pullSandbox(TB) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return n.Pull(ctx, n.PauseImage, nil)
}

// ContainerdBinary is the daemon this node runs (what the agent's `config dump` must use).
func (n *Node) ContainerdBinary() string { return filepath.Join(ToolsBin(), n.containerdTool()) }

func (n *Node) containerdTool() string { return ContainerdTool(n.opts.Containerd) }

// ContainerdTool is the tools-cache name of a containerd daemon by CONTAINERD_MATRIX
// version: "" is the pinned one. Nodes of other lines are described in nodeconfig.
func ContainerdTool(version string) string { return nodeconfig.Tool(version) }

func (n *Node) runContainerd() error {
	// containerd runs the shim's `-info` with its own environment, not the shims': the
	// shim finds the node's Brewlet state there too.
	env := []string{"PATH=" + n.BinDir + ":" + ToolsBin() + ":" + os.Getenv("PATH"), vocab.EnvHostPrefix + "=" + n.Seen.HostPrefix}
	binds, err := n.viewBinds()
	if err != nil {
		return err
	}
	if !nodeconfig.ShimAPI23(n.containerdTool()) {
		// Shim sockets would go to the machine's /run/containerd/s: this daemon, its shims
		// and runc get a /run of their own, the node's directory bound over /run. The
		// directory outlives each daemon, so a restarted one finds its running shims' sockets.
		run := filepath.Join(n.Dir, "run")
		if err := os.MkdirAll(run, 0o755); err != nil {
			return err
		}
		binds = append([][2]string{{run, "/run"}}, binds...)
	}
	args := []string{n.ContainerdBinary(), "--config", n.ConfigPath}
	if len(binds) > 0 {
		// A mount namespace that receives the machine's mounts (the kubelet's volumes) and
		// sends none back.
		script := []string{}
		for _, b := range binds {
			script = append(script, "mount --bind "+shQuote(b[0])+" "+shQuote(b[1]))
		}
		script = append(script, `exec "$@"`)
		args = append([]string{"/usr/bin/unshare", "--mount", "--propagation", "slave", "--", "/bin/sh", "-ec",
			strings.Join(script, "\n"), "containerd"}, args...)
	}
	p, err := n.Start("containerd", env, n.inNetns(args)...)
	if err != nil {
		return err
	}
	n.Containerd = p
	return nil
}

// viewBinds are the binds (source, target) that give the node's processes their view of
// NodeOptions.View: none without one. Sources and targets are created when missing.
func (n *Node) viewBinds() ([][2]string, error) {
	if n.opts.View == "" {
		return nil, nil
	}
	binds := [][2]string{{n.HostPrefix, n.Seen.HostPrefix},
		{filepath.Dir(n.ConfigPath), filepath.Dir(n.Seen.ConfigPath)}, {filepath.Dir(n.Socket), filepath.Dir(n.Seen.Socket)}}
	for _, b := range binds {
		for _, d := range b {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
	}
	return binds, nil
}

// RestartContainerd stops containerd and starts it again with its (possibly changed)
// config, as systemctl restart would; running containers and their shims survive.
func (n *Node) RestartContainerd(ctx context.Context) error {
	n.Containerd.Stop(20 * time.Second)
	if err := n.runContainerd(); err != nil {
		return err
	}
	return n.waitCRI()
}

func (n *Node) waitCRI() error {
	return n.Containerd.WaitReady(60*time.Second, func(ctx context.Context) error {
		st, err := n.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			return err
		}
		for _, c := range st.GetStatus().GetConditions() {
			if (c.Type == runtimeapi.RuntimeReady || c.Type == runtimeapi.NetworkReady) && !c.Status {
				return fmt.Errorf("CRI condition %s false: %s %s", c.Type, c.Reason, c.Message)
			}
		}
		return nil
	})
}

// Gateway is the bridge's address with HostReachable: the subnet's first address.
func (n *Node) Gateway() string {
	ip, _, _ := net.ParseCIDR(n.Subnet)
	ip = ip.To4()
	return net.IPv4(ip[0], ip[1], ip[2], ip[3]+1).String()
}

// createBridge makes the node's bridge with the gateway address before any pod exists
// (the bridge plugin reuses an existing bridge). It is removed with the node (recorded).
func (n *Node) createBridge() error {
	_, nw, err := net.ParseCIDR(n.Subnet)
	if err != nil {
		return err
	}
	ones, _ := nw.Mask.Size()
	for _, args := range [][]string{
		{"link", "add", n.Bridge, "type", "bridge"},
		{"addr", "add", fmt.Sprintf("%s/%d", n.Gateway(), ones), "dev", n.Bridge},
		{"link", "set", n.Bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func (n *Node) writeCNIConfig() error {
	rng := map[string]string{"subnet": n.Subnet}
	ipam := map[string]any{"type": "host-local", "ranges": [][]map[string]string{{rng}},
		"dataDir": filepath.Join(n.Dir, "cni-ipam")}
	if n.opts.HostReachable {
		rng["gateway"] = n.Gateway()
		ipam["routes"] = []map[string]string{{"dst": "0.0.0.0/0"}}
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "brewlet-e2e-" + n.ID,
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": n.Bridge, "isGateway": false, "ipMasq": false, "ipam": ipam},
			map[string]any{"type": "loopback"},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(n.Dir, "cni")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "10-brewlet-e2e.conflist"), b, 0o644)
}

// freeSubnet picks a /24 in 10.200.0.0/13 that no route of the host covers.
func freeSubnet() (string, error) {
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return "", fmt.Errorf("list routes: %w", err)
	}
	var used []*net.IPNet
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		dst := f[0]
		if dst == "local" || dst == "broadcast" || dst == "unreachable" {
			if len(f) < 2 {
				continue
			}
			dst = f[1]
		}
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if _, nw, err := net.ParseCIDR(dst); err == nil {
			used = append(used, nw)
		}
	}
	for i := 0; i < 100; i++ {
		cand := fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(8), rand.IntN(256))
		_, nw, _ := net.ParseCIDR(cand)
		clash := false
		for _, u := range used {
			if u.Contains(nw.IP) || nw.Contains(u.IP) {
				clash = true
				break
			}
		}
		if !clash {
			return cand, nil
		}
	}
	return "", fmt.Errorf("no free /24 in 10.200.0.0/13")
}

// DevRoot is the device tree this node's shims scan for groups that own device nodes
// (the node's /dev in production). Tests create device nodes in it; it starts empty.
func (n *Node) DevRoot() string { return filepath.Join(n.Dir, "dev") }
