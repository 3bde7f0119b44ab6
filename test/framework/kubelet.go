package framework

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework/hostops"
)

// KubeletOptions vary a kubelet node.
type KubeletOptions struct {
	// NodeName is the Node's name; empty means "kubelet-<instance id>".
	NodeName string
	// Labels are set by the kubelet when it registers the Node (NodeRestriction applies:
	// no kubernetes.io labels outside the allowed set), those under
	// node-restriction.kubernetes.io/ (pool keys) by the administrator once it registered,
	// as a platform's node provisioning sets them.
	Labels map[string]string
	// Node varies the node's containerd configuration.
	Node NodeOptions
	// Registry is a registry the kubelet gets credentials for from a credential provider
	// plugin (test/framework/credplugin) named by its CredentialProviderConfig, as nodes get
	// cloud registries' tokens; nil: the node's own.
	Registry *RegistryAccess
}

// KubeletNode is a Node (its own containerd, registry, bridge and cgroup parent) with a
// real kubelet registered with a control plane. The kubelet is the only CRI client that
// creates pods on it: a kubelet removes pods it does not know, so crictl-level tests use
// StartNode instead.
type KubeletNode struct {
	*Node
	NodeName    string
	NodeIP      string // the kubelet's InternalIP: Node.NodeAddr (the kubelet refuses loopback)
	Kubelet     *Process
	RootDir     string // --root-dir, a shared mount so the kubelet's volume mounts reach containerd
	PodLogsDir  string
	KubeletPort int
	HealthzPort int
	// CredentialProviderConfig and CredentialProviderBinDir are the kubelet's
	// --image-credential-provider-config and -bin-dir ("" without a registry to serve).
	CredentialProviderConfig, CredentialProviderBinDir string
}

// KernelTunables are the sysctls a kubelet with protectKernelDefaults: false sets on its
// host, and the values it sets. The harness shadows each of them in the kubelet's mount
// namespace with a file holding that value, so the kubelet finds nothing to change.
var KernelTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// ShadowedHostDirs are host directories in which a kubelet creates files on fixed paths
// whatever its configuration: /var/log/containers (log symlinks) and
// /var/lib/kubelet/device-plugins (the device manager's socket). In the kubelet's mount
// namespace each is a private directory of the instance.
var ShadowedHostDirs = []string{"/var/log", "/var/lib"}

// KubeletSysctls reads KernelTunables as the kubelet sees them, in its mount namespace.
func (k *KubeletNode) KubeletSysctls() (map[string]string, error) {
	out := map[string]string{}
	for name := range KernelTunables {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(k.Kubelet.rec.PID), "root/proc/sys", name))
		if err != nil {
			return nil, err
		}
		out[name] = strings.TrimSpace(string(b))
	}
	return out, nil
}

// HostSysctls reads the host's current values of KernelTunables (keys as in /proc/sys).
func HostSysctls() (map[string]string, error) {
	out := map[string]string{}
	for k := range KernelTunables {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, err
		}
		out[k] = strings.TrimSpace(string(b))
	}
	return out, nil
}

// StartKubeletNode starts a fresh node (as StartNode, with HostReachable) and a kubelet on
// it registered with cp (StartKubelet).
func StartKubeletNode(t TB, cp *ControlPlane, opts KubeletOptions) *KubeletNode {
	t.Helper()
	opts.Node.HostReachable = true
	return StartKubelet(t, cp, StartNodeWith(t, opts.Node), opts)
}

// StartKubelet starts a kubelet on node n (started with HostReachable; opts.Node is not used)
// registered with cp as a real Node, and waits until the Node is Ready. Its InternalIP is
// Node.NodeAddr (the bridge's gateway, or its end of the link of a node with a network
// namespace of its own): pods and the API server reach it, the LAN does not. Everything is
// removed when the test ends: the kubelet is stopped first, then the node is cleaned up as
// usual.
func StartKubelet(t TB, cp *ControlPlane, n *Node, opts KubeletOptions) *KubeletNode {
	t.Helper()
	kubeletBin := Tool(t, "kubelet")
	for _, b := range []string{"/usr/bin/unshare", "/bin/sh"} {
		if _, err := os.Stat(b); err != nil {
			Unavailable(t, "%s missing (util-linux)", b)
		}
	}
	if !n.opts.HostReachable {
		t.Fatalf("node %s: a kubelet needs a node started with HostReachable", n.ID)
	}
	k := &KubeletNode{Node: n, NodeName: opts.NodeName, RootDir: filepath.Join(n.Dir, "kubelet"),
		PodLogsDir: filepath.Join(n.Dir, "pod-logs"), KubeletPort: FreePort(t), HealthzPort: FreePort(t), NodeIP: n.NodeAddr()}
	if k.NodeName == "" {
		k.NodeName = "kubelet-" + n.ID
	}
	// A kubelet may not set node-restriction.kubernetes.io/ labels (it refuses to start with
	// them): those the administrator sets once the Node registered.
	own, restricted := map[string]string{}, map[string]string{}
	for key, v := range opts.Labels {
		if strings.HasPrefix(key, vocab.NodeRestrictionPrefix) {
			restricted[key] = v
		} else {
			own[key] = v
		}
	}
	steps := []struct {
		name string
		fn   func() error
	}{
		{"create cgroup root", k.createCgroupRoot},
		{"certificates and kubeconfig", func() error { return k.writeCredentials(cp) }},
		{"shared root directory", k.sharedRootDir},
		{"containerd sees the root directory", k.restartViewContainerd},
		{"credential provider", func() error { return k.credentialProvider(t, opts.Registry) }},
		{"start kubelet", func() error { return k.start(t, cp, kubeletBin, own) }},
		{"wait for Node Ready", func() error { return k.waitNodeReady(cp, 180*time.Second) }},
		{"label the Node as its provisioning would", func() error { return labelNode(cp, k.NodeName, restricted) }},
	}
	for _, s := range steps {
		if err := s.fn(); err != nil {
			t.Fatalf("kubelet node %s: %s: %v", k.NodeName, s.name, err)
		}
	}
	return k
}

// labelNode sets labels on a Node with the administrator's credentials (none: nothing).
func labelNode(cp *ControlPlane, node string, labels map[string]string) error {
	if len(labels) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	return cp.Client.Patch(ctx, n, client.RawPatch(types.MergePatchType, patch))
}

func (k *KubeletNode) file(name string) string { return filepath.Join(k.Dir, "kubelet-conf", name) }

// createCgroupRoot creates the node's cgroup parent in every hierarchy: the kubelet
// requires its cgroupRoot to exist and puts kubepods (and every pod) below it.
func (k *KubeletNode) createCgroupRoot() error {
	for _, d := range hostops.CgroupDirs(k.CgroupParent) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if filepath.Base(filepath.Dir(d)) != "cpuset" {
			continue
		}
		// cgroup v1 cpuset: a new cgroup starts with no CPUs and memory nodes.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	return nil
}

// writeCredentials issues the kubelet's client certificate (system:node:<name> in
// system:nodes, so the Node authorizer and NodeRestriction apply) and its serving
// certificate (verified by the API server), and writes its kubeconfig.
func (k *KubeletNode) writeCredentials(cp *ControlPlane) error {
	dir := filepath.Dir(k.file("x"))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	crt, key, err := cp.issueClient(dir, "system:node:"+k.NodeName, "system:nodes")
	if err != nil {
		return err
	}
	if _, _, err := cp.pki.IssueIn(dir, "serving", pkix.Name{CommonName: k.NodeName}, []string{k.NodeName, "localhost"},
		[]net.IP{net.ParseIP(k.NodeIP), net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth); err != nil {
		return err
	}
	return writeKubeconfig(k.file("kubeconfig"), &rest.Config{Host: cp.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAFile: cp.pki.CACert, CertFile: crt, KeyFile: key}})
}

// sharedRootDir makes the kubelet's root directory a shared mount in the host's mount
// namespace. The kubelet runs in a mount namespace of its own (see start); as a peer of
// this mount, what it mounts below its root directory (secret and projected volumes are
// tmpfs) appears here too, where containerd bind-mounts it into containers. The
// instance cleanup unmounts it with everything else below the instance directory.
func (k *KubeletNode) sharedRootDir() error {
	if err := os.MkdirAll(k.RootDir, 0o750); err != nil {
		return err
	}
	if err := unix.Mount(k.RootDir, k.RootDir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", k.RootDir, err)
	}
	if err := unix.Mount("", k.RootDir, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make %s private: %w", k.RootDir, err)
	}
	if err := unix.Mount("", k.RootDir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", k.RootDir, err)
	}
	return nil
}

// restartViewContainerd restarts a containerd that runs in a mount namespace of its own
// (NodeOptions.View): that namespace was copied before the kubelet's root directory became
// a shared mount, so it would never receive the volumes the kubelet mounts below it. Its
// new namespace holds the shared mount as a slave, which receives them. Nothing runs on
// the node yet.
func (k *KubeletNode) restartViewContainerd() error {
	if k.opts.View == "" {
		return nil
	}
	return k.RestartContainerd(context.Background())
}

func (k *KubeletNode) config(cp *ControlPlane) map[string]any {
	ep := "unix://" + k.Socket
	return map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// This machine type: cgroup v1 only, PID 1 is not systemd.
		"failCgroupV1": false,
		"cgroupDriver": "cgroupfs",
		// Pods land under the node's private cgroup parent: <parent>/kubepods/...
		"cgroupRoot":               "/" + k.CgroupParent,
		"cgroupsPerQOS":            true,
		"enforceNodeAllocatable":   []string{"pods"},
		"containerRuntimeEndpoint": ep,
		"imageServiceEndpoint":     ep,
		"podLogsDir":               k.PodLogsDir,
		"volumePluginDir":          filepath.Join(k.Dir, "kubelet-volume-plugins"),
		"address":                  k.NodeIP,
		"port":                     k.KubeletPort,
		"readOnlyPort":             0,
		"healthzBindAddress":       k.healthzHost(),
		"healthzPort":              k.HealthzPort,
		"tlsCertFile":              k.file("serving.crt"),
		"tlsPrivateKeyFile":        k.file("serving.key"),
		// Only clients with a certificate of the harness CA (the API server) reach it.
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": false},
			"x509":      map[string]any{"clientCAFile": cp.pki.CACert},
		},
		"authorization":          map[string]any{"mode": "AlwaysAllow"},
		"failSwapOn":             false,
		"protectKernelDefaults":  false, // its sysctl writes are shadowed instead (start)
		"makeIPTablesUtilChains": false,
		"oomScoreAdj":            0, // no CAP_SYS_RESOURCE: no negative scores
		"resolvConf":             "/etc/resolv.conf",
		"registerNode":           true,
		"serializeImagePulls":    false,
		// A busy shared test machine must not make the kubelet evict or collect images.
		"evictionHard": map[string]string{"memory.available": "1Mi", "nodefs.available": "1%",
			"nodefs.inodesFree": "1%", "imagefs.available": "1%", "imagefs.inodesFree": "1%"},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"nodeStatusUpdateFrequency":   "2s",
		"nodeStatusReportFrequency":   "10s",
		"syncFrequency":               "10s",
	}
}

// start runs the kubelet in a mount namespace of its own in which every kernel tunable
// it would set (KernelTunables) is a bind-mounted file already holding its value, and
// every ShadowedHostDirs entry is a private directory (and the node's view is bound, see
// NodeOptions.View).
// The mounts containing those paths are made slaves first, so none of these binds
// propagates to the host; the kubelet's root directory stays a peer of the host's.
func (k *KubeletNode) start(t TB, cp *ControlPlane, bin string, labels map[string]string) error {
	cfg, err := json.MarshalIndent(k.config(cp), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(k.file("config.yaml"), cfg, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(k.Dir, "kubelet-volume-plugins"), 0o755); err != nil {
		return err
	}
	shadow := filepath.Join(k.Dir, "kubelet-shadow")
	binds := map[string]string{}
	for _, d := range ShadowedHostDirs {
		if strings.HasPrefix(k.Dir+"/", d+"/") {
			return fmt.Errorf("instance directory %s is below %s, which the kubelet's namespace shadows", k.Dir, d)
		}
		binds[d] = filepath.Join(shadow, strings.ReplaceAll(strings.TrimPrefix(d, "/"), "/", "-"))
		if err := os.MkdirAll(binds[d], 0o755); err != nil {
			return err
		}
	}
	for name, val := range KernelTunables {
		f := filepath.Join(shadow, "sysctl", strings.ReplaceAll(name, "/", "."))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, []byte(val+"\n"), 0o644); err != nil {
			return err
		}
		binds[filepath.Join("/proc/sys", name)] = f
	}
	// With a cluster view, the kubelet checks and creates hostPath volumes in the node's
	// own host layout, as containerd then mounts them.
	view, err := k.viewBinds()
	if err != nil {
		return err
	}
	for _, b := range view {
		binds[b[1]] = b[0]
	}
	targets := make([]string, 0, len(binds))
	for dst := range binds {
		targets = append(targets, dst)
	}
	sort.Strings(targets)
	var script []string
	seen := map[string]bool{}
	for _, dst := range targets {
		m, err := containingMount(dst)
		if err != nil {
			return err
		}
		if !seen[m] {
			seen[m] = true
			script = append(script, "mount --make-slave "+shQuote(m))
		}
	}
	for _, dst := range targets {
		script = append(script, "mount --bind "+shQuote(binds[dst])+" "+shQuote(dst))
	}
	script = append(script, `exec "$@"`)
	var lbl []string
	for key, v := range labels {
		lbl = append(lbl, key+"="+v)
	}
	sort.Strings(lbl)
	// A cluster left running (make demo) logs less: nothing rotates the log.
	verbosity := "2"
	if keepRunning.Load() {
		verbosity = "0"
	}
	args := []string{"/usr/bin/unshare", "--mount", "--propagation", "unchanged", "--", "/bin/sh", "-ec",
		strings.Join(script, "\n"), "kubelet", bin,
		"--config=" + k.file("config.yaml"), "--kubeconfig=" + k.file("kubeconfig"),
		"--root-dir=" + k.RootDir, "--cert-dir=" + filepath.Join(k.Dir, "kubelet-pki"),
		"--hostname-override=" + k.NodeName, "--node-ip=" + k.NodeIP, "--v=" + verbosity}
	if len(lbl) > 0 {
		args = append(args, "--node-labels="+strings.Join(lbl, ","))
	}
	if k.CredentialProviderConfig != "" {
		args = append(args, "--image-credential-provider-config="+k.CredentialProviderConfig,
			"--image-credential-provider-bin-dir="+k.CredentialProviderBinDir)
	}
	p, err := k.Start("kubelet", nil, k.inNetns(args)...)
	if err != nil {
		return err
	}
	k.Kubelet = p
	// Stop the kubelet before the node removes its pods, or it would start them again.
	k.OnCleanup(func() { p.Stop(20 * time.Second) })
	return p.WaitReady(90*time.Second, func(ctx context.Context) error {
		return HTTPOK(ctx, http.DefaultClient, "http://"+net.JoinHostPort(k.healthzHost(), strconv.Itoa(k.HealthzPort))+"/healthz")
	})
}

// healthzHost is where the kubelet serves /healthz: loopback, or the node's address when
// the node has a network namespace of its own (the machine's loopback is not the node's).
func (k *KubeletNode) healthzHost() string {
	if k.net != nil {
		return k.NodeIP
	}
	return "127.0.0.1"
}

// waitNodeReady waits until the Node exists with condition Ready=True.
func (k *KubeletNode) waitNodeReady(cp *ControlPlane, timeout time.Duration) error {
	return k.Kubelet.WaitReady(timeout, func(ctx context.Context) error { return NodeReady(ctx, cp.Client, k.NodeName) })
}

// NodeReady reports why the Node is not Ready=True (nil when it is).
func NodeReady(ctx context.Context, c client.Reader, name string) error {
	var node corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return err
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s Ready=%s: %s %s", name, cond.Status, cond.Reason, cond.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", name)
}

// containingMount returns the mount point of the mount that holds path.
func containingMount(path string) (string, error) {
	best := ""
	for _, mp := range hostops.MountPoints() {
		if (mp == "/" || path == mp || strings.HasPrefix(path, mp+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if best == "" {
		return "", fmt.Errorf("no mount holds %s", path)
	}
	return best, nil
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
