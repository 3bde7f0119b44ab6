// Package cluster is a real one-node Kubernetes cluster on this machine, for Brewlet's main
// job (`make demo`) and its top test tier: etcd, kube-apiserver (served on the node's
// address so pods reach it), kube-controller-manager, kube-scheduler, and a kubelet node with
// its own containerd, runc, loopback registry and CNI bridge, offering the brewlet handler.
// Everything is started by test/framework on private paths, ports, bridge and cgroup names.
package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/test/framework"
)

// The node pool label the kubelet registers its Node with, and the pool's name: the
// chart's provisioner.pools and the NodeProfile select it.
const (
	PoolKey  = "node-restriction.kubernetes.io/pool"
	PoolName = "local"
)

// Cluster is what a user of the cluster needs to know about it. It is saved next to the
// components (Save) so that a second `make demo` finds and reuses it.
type Cluster struct {
	Kubeconfig string `json:"kubeconfig"` // cluster-admin
	APIHost    string `json:"apiHost"`    // the API server's address, reachable from pods
	APIPort    int    `json:"apiPort"`
	Registry   string `json:"registry"` // host:port of the node's loopback registry
	// The registry serves TLS with a CA of its own (RegistryCAFile, in no system store) and
	// requires credentials, as production registries do. The kubelets get them from a
	// credential provider plugin their CredentialProviderConfig names (the node paths below,
	// which the chart's agent reads too); the hosts.toml in RegistryHostsDir trusts the CA.
	RegistryCAFile           string `json:"registryCAFile"`
	RegistryUser             string `json:"registryUser"`
	RegistryPassword         string `json:"registryPassword"`
	RegistryHostsDir         string `json:"registryHostsDir"`
	CredentialProviderConfig string `json:"credentialProviderConfig"`
	CredentialProviderBinDir string `json:"credentialProviderBinDir"`
	NodeName                 string `json:"nodeName"`
	// HostPrefix relocates the node's Brewlet paths (the chart's provisioner.hostPrefix; the
	// shim gets the same prefix from containerd's environment).
	HostPrefix       string `json:"hostPrefix"`
	ContainerdConfig string `json:"containerdConfig"`
	ContainerdSocket string `json:"containerdSocket"`
	// ContainerdBinary and ContainerdRestartCommand, with Options.AgentRegistersHandler:
	// the machine's containerd and the command that restarts the node's, for the chart's
	// agent in containerd mode validated. Empty: the node ships the handler (mode none).
	ContainerdBinary         string `json:"containerdBinary,omitempty"`
	ContainerdRestartCommand string `json:"containerdRestartCommand,omitempty"`
	// Dirs are the component directories (control plane, node) with their logs.
	Dirs []string `json:"dirs"`

	// Node is set when the cluster was started by this process (nil when loaded); Nodes
	// holds every node, Node first.
	Node  *framework.KubeletNode   `json:"-"`
	Nodes []*framework.KubeletNode `json:"-"`
}

// Options vary the cluster.
type Options struct {
	// AgentRegistersHandler starts the node's containerd without the brewlet handler: the
	// chart's agent registers it as on a stock node (mode validated), restarting containerd
	// through a command that this process serves (framework.Node.ServeRestarts). Tests
	// only: once this process exits nobody restarts containerd.
	AgentRegistersHandler bool
	// Nodes is the number of kubelet nodes (default 1). With more, every node has its own
	// network namespace, containerd, registry, bridge, cgroup parent and host state, seen at the same paths
	// through a shared view (framework.NodeOptions.View), and trusts the first node's
	// registry, where the cluster's images are pushed. Not with AgentRegistersHandler.
	Nodes int
}

// Start starts the cluster with the brewlet handler in containerd's config (`make demo`:
// the cluster outlives the process). Brewlet's CRDs are not installed: the chart does that.
func Start(t framework.TB) *Cluster { return StartWith(t, Options{}) }

// StartWith starts the cluster with options.
func StartWith(t framework.TB, o Options) *Cluster {
	t.Helper()
	count := max(o.Nodes, 1)
	if count > 1 && o.AgentRegistersHandler {
		t.Fatalf("cluster: AgentRegistersHandler serves one node's containerd restarts; not with %d nodes", count)
	}
	nopts := framework.NodeOptions{HostReachable: true, WithoutBrewletHandler: o.AgentRegistersHandler}
	if count > 1 {
		nopts.View, nopts.OwnNetwork = framework.NewInstance(t, "v").Dir, true
	}
	first := nopts
	// The first node first: the API server listens on its gateway address, where pods reach it.
	nodes := []*framework.Node{framework.StartNodeWith(t, first)}
	access := nodes[0].RegistryAccess
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{ControllerManager: true, Scheduler: true,
		SkipCRDs: true, Address: nodes[0].HostAddr()})
	for len(nodes) < count {
		n := framework.StartNodeWith(t, nopts)
		if err := n.TrustRegistry(nodes[0].Registry, access); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	c := &Cluster{Kubeconfig: cp.Kubeconfig, APIHost: cp.Address, APIPort: cp.Port, Registry: nodes[0].Registry,
		RegistryCAFile: access.CAFile, RegistryUser: access.User, RegistryPassword: access.Password,
		RegistryHostsDir: filepath.Join(nodes[0].Dir, "certs.d"),
		HostPrefix:       nodes[0].Seen.HostPrefix, ContainerdConfig: nodes[0].Seen.ConfigPath, ContainerdSocket: nodes[0].Seen.Socket,
		Dirs: []string{cp.Dir}}
	for _, n := range nodes {
		kn := framework.StartKubelet(t, cp, n, framework.KubeletOptions{Labels: map[string]string{PoolKey: PoolName}, Registry: access})
		c.Nodes = append(c.Nodes, kn)
		c.Dirs = append(c.Dirs, kn.Dir)
	}
	c.Node, c.NodeName = c.Nodes[0], c.Nodes[0].NodeName
	c.CredentialProviderConfig, c.CredentialProviderBinDir = c.Node.CredentialProviderConfig, c.Node.CredentialProviderBinDir
	if o.AgentRegistersHandler {
		c.ContainerdBinary = framework.Tool(t, "containerd")
		c.ContainerdRestartCommand = nodes[0].ServeRestarts(t)
	}
	return c
}

// WorkDir holds files of the cluster's users (helm's state, chart values, the CLI): the
// control plane's directory, removed with it.
func (c *Cluster) WorkDir() string { return c.Dirs[0] }

// StatePath is where Save writes the cluster's description below the framework's BaseDir.
func StatePath() string { return filepath.Join(framework.BaseDir(), "cluster.json") }

// Save writes the cluster's description to StatePath.
func (c *Cluster) Save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := StatePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, StatePath())
}

// Load reads the description Save wrote; os.ErrNotExist when there is none.
func Load() (*Cluster, error) {
	b, err := os.ReadFile(StatePath())
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("%s: %w", StatePath(), err)
	}
	return c, nil
}

// Gone reports a component process of the cluster that no longer runs.
func (c *Cluster) Gone() error {
	for _, d := range c.Dirs {
		if err := framework.CheckAlive(d); err != nil {
			return err
		}
	}
	return nil
}

// RESTConfig is the cluster-admin client configuration.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// Healthy reports why a saved cluster cannot be reused: one of its processes is gone, the
// API server is not ready, or the node is not Ready.
func (c *Cluster) Healthy(ctx context.Context) error {
	if c.RegistryCAFile == "" {
		return fmt.Errorf("it was started by an earlier Brewlet, whose registry served plain HTTP")
	}
	if err := c.Gone(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cfg, err := c.RESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("API server at %s:%d: %w", c.APIHost, c.APIPort, err)
	}
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	return framework.NodeReady(ctx, cl, c.NodeName)
}

// RegistryAccess is how a client reaches the cluster's registry (its CA and credentials).
func (c *Cluster) RegistryAccess() *framework.RegistryAccess {
	return framework.NewRegistryAccess(c.Registry, c.RegistryCAFile, c.RegistryUser, c.RegistryPassword)
}
