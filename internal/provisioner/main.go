package provisioner

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"runtime"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/metricsauth"
	"brewlet.sh/brewlet/internal/provisioner/agent"
	"brewlet.sh/brewlet/internal/provisioner/clusterview"
	"brewlet.sh/brewlet/internal/provisioner/containerd"
	"brewlet.sh/brewlet/internal/provisioner/gc"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/provisioner/metrics"
	"brewlet.sh/brewlet/internal/provisioner/tasks"
	"brewlet.sh/brewlet/internal/provisioner/writer"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/registry/credprovider"
	"brewlet.sh/brewlet/internal/signature"
	"brewlet.sh/brewlet/internal/vocab"
)

// Options configure the node agent (the brewlet-provisioner command's flags).
type Options struct {
	NodeName, Namespace, Identity, HostPrefix  string
	PodUID                                     string // the agent pod's UID, reported as agentPodUID
	AuthTTL, Period                            time.Duration
	ContainerdRestart                          string // validated | none
	ContainerdConfig, ContainerdBinary         string
	ContainerdConfigTemplate                   string // containerd.TemplateAuto, a path, or "" (none)
	HostRoot                                   string // the node's root filesystem, for containerd's binary and the restart command
	ContainerdSocket, ContainerdRestartCommand string
	ShimSource, ShimDir                        string
	InsecureRegistries                         bool
	RegistryCAFiles                            []string // authorities trusted besides the system's
	RegistryHostsDir                           string   // the node's containerd certs.d ("" none)
	SignatureKeys                              string   // the cluster's signature keys, a PEM file ("" none)
	SignatureIdentities                        string   // the cluster's keyless identities, a JSON list ("" none)
	SignatureTrustedRoot                       string   // a Sigstore trusted_root.json for keyless identities ("" none)
	// The node's kubelet credential providers (node paths): the CredentialProviderConfig
	// and the plugins' directory.
	CredentialProviderConfig, CredentialProviderBinDir string
	GCGrace                                            time.Duration // provisioner.gc.grace
	MountInfo                                          string        // the host's mount table
	MetricsAddress                                     string        // "" disables /metrics
	Mirrors                                            map[string][]string
	StartupTaints                                      []string // removed once the node can start Brewlet containers
}

// Scheme has the types the agent reads and writes.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = brewletv1.AddToScheme(s)
	return s
}

// Main runs the agent until ctx ends: it waits for the node's writer lease, then
// reconciles; the first pass in which a profile selects the node installs the shim and
// registers the handler with containerd (mode validated), and passes in which none does
// clean the node up.
func Main(ctx context.Context, o Options) error {
	if o.NodeName == "" {
		return errors.New("--node-name (or NODE_NAME) is required")
	}
	if o.ContainerdRestart != string(vocab.ContainerdRestartValidated) && o.ContainerdRestart != string(vocab.ContainerdRestartNone) {
		return fmt.Errorf("--containerd-restart must be validated or none, not %q", o.ContainerdRestart)
	}
	// Refused before anything runs: a TTL above the cap would keep a disconnected node
	// starting containers for longer than MaxAuthTTL allows.
	if err := agent.ValidateTiming(o.AuthTTL, o.Period); err != nil {
		return err
	}
	for _, k := range o.StartupTaints {
		if err := agent.ValidStartupTaint(k); err != nil {
			return fmt.Errorf("--startup-taints (provisioner.startupTaints): %w", err)
		}
	}
	if o.GCGrace < 0 {
		return vocab.Errorf(vocab.ReasonLimitExceeded, "--gc-grace (provisioner.gc.grace) is %s; it must be 0 or more", o.GCGrace)
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	// The API server is never reached through HTTPS_PROXY/HTTP_PROXY (chart value proxy.*,
	// meant for registries): in-cluster traffic does not leave through an egress proxy.
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	trust, err := registry.LoadTrust(o.RegistryCAFiles)
	if err != nil {
		return fmt.Errorf("--registry-ca-file (chart value registry.caBundle): %w", err)
	}
	layout := hoststate.DefaultLayout
	if o.HostPrefix != "" {
		layout = hoststate.Under(o.HostPrefix)
	}
	checkRegistryHostsDir(o)
	keychain, err := o.keychain()
	if err != nil {
		return err
	}
	sigKeys, sigRoot, err := signature.LoadCluster(o.SignatureKeys, o.SignatureIdentities, o.SignatureTrustedRoot)
	if err != nil {
		return fmt.Errorf("signature verification (chart values verification.*): %w", err)
	}
	a := &agent.Agent{Client: c, NodeName: o.NodeName, PodUID: types.UID(o.PodUID), Layout: layout, AuthTTL: o.AuthTTL, Period: o.Period,
		Installer: &install.Installer{Layout: layout, Insecure: o.InsecureRegistries, Mirrors: o.Mirrors, Trust: trust, Keychain: keychain,
			SignatureKeys: sigKeys, TrustedRoot: sigRoot, NodeHosts: registry.NodeHosts{Dir: o.RegistryHostsDir},
			Platform: v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}},
		Collector: &gc.Collector{Layout: layout, Grace: o.GCGrace, MountInfo: o.MountInfo},
		Tasks:     &tasks.Containerd{Socket: o.ContainerdSocket},
		HostSetup: &containerd.HostChanges{Layout: layout, Containerd: o.containerd(layout), ShimSource: o.ShimSource, ShimDir: o.ShimDir},
		// The mode comes from the NodeRuntime spec when the operator wrote one.
		ContainerdMode: vocab.ContainerdRestart(o.ContainerdRestart),
		StartupTaints:  o.StartupTaints,
		Log:            log.Printf}
	wake := make(chan struct{}, 1)
	view, err := clusterview.NewView(cfg, Scheme(), c)
	if err != nil {
		return err
	}
	if err := view.Start(ctx, wake); err != nil {
		return err
	}
	a.View = view
	go clusterview.Wakeup{Client: c, NodeName: o.NodeName, Log: log.Printf}.Run(ctx, wake)
	go tasks.Events{Socket: o.ContainerdSocket, Layout: layout, Log: log.Printf}.Run(ctx, wake)
	a.Wake = wake
	if o.MetricsAddress != "" {
		reg := prometheus.NewRegistry()
		a.Metrics = metrics.NewMetrics(layout, reg)
		reg.MustRegister(view.Collectors()...)
		srv, err := metricsauth.Server(cfg, o.MetricsAddress, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), logr.FromSlogHandler(slog.Default().Handler()))
		if err != nil {
			return err
		}
		go func() {
			if err := srv.ListenAndServeTLS("", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Printf("metrics: %v", err)
			}
		}()
		defer func() { _ = srv.Close() }()
	}
	return writer.Lease{Client: cs, Namespace: o.Namespace, NodeName: o.NodeName, Identity: o.Identity}.
		Run(ctx, func(ctx context.Context, isWriter func() bool) {
			a.IsWriter = isWriter
			if err := a.Run(ctx); err != nil {
				log.Printf("agent: %v", err)
			}
		})
}

// containerd is how the agent edits, checks and restarts the node's containerd.
func (o Options) containerd(layout hoststate.Layout) *containerd.Handler {
	host := containerd.HostExec{Root: o.HostRoot}
	return &containerd.Handler{ConfigPath: o.ContainerdConfig, Template: o.ContainerdConfigTemplate, Binary: o.ContainerdBinary, Host: host,
		WriteOptions: layout.WriteHandlerOptions,
		Restart: func(ctx context.Context) error {
			cmd, err := host.Shell(ctx, o.ContainerdRestartCommand)
			if err != nil {
				return err
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s: %v: %s", o.ContainerdRestartCommand, err, out)
			}
			return nil
		},
		Health: containerd.HandlerHealth(o.ContainerdSocket)}
}

// checkRegistryHostsDir says at start when the agent's registry host directory is not the one
// the node's containerd reads: runtime images would then not come through the node's
// mirrors and authorities. The agent goes on with what it was given (the administrator's
// explicit value); the log names the value to set.
func checkRegistryHostsDir(o Options) {
	node, err := o.containerd(hoststate.DefaultLayout).RegistryConfigPath()
	switch {
	case err != nil:
		log.Printf("registry hosts: containerd's registry config_path not read (%v); runtime images use %q", err, o.RegistryHostsDir)
	case node != "" && filepath.Clean(node) != filepath.Clean(o.RegistryHostsDir):
		log.Printf("registry hosts: the node's containerd reads registry hosts from %s, the agent from %q: runtime images do not follow the node's registry configuration; set provisioner.registry.hostsDir=%s", node, o.RegistryHostsDir, node)
	case node == "" && o.RegistryHostsDir != "":
		log.Printf("registry hosts: the node's containerd names no registry config_path; runtime images still follow %s where it configures a registry", o.RegistryHostsDir)
	}
}

// keychain is the agent's source of registry credentials: the node's kubelet credential
// providers, when configured, then the Docker config (a mounted pull Secret). Plugins run
// as the kubelet runs them: chrooted into the node's root when the agent has it.
func (o Options) keychain() (*credprovider.Keychain, error) {
	if o.CredentialProviderConfig == "" {
		return nil, nil
	}
	if o.CredentialProviderBinDir == "" {
		return nil, errors.New("--image-credential-provider-config needs --image-credential-provider-bin-dir (provisioner.registry.credentialProviders.binDir)")
	}
	providers, skipped, err := credprovider.Load(filepath.Join(o.HostRoot, o.CredentialProviderConfig))
	if err != nil {
		return nil, fmt.Errorf("--image-credential-provider-config (provisioner.registry.credentialProviders.config): %w", err)
	}
	for _, name := range skipped {
		log.Printf("credential provider %s needs a pod's service account token (tokenAttributes); the agent pulls for no pod and does not use it", name)
	}
	return &credprovider.Keychain{Providers: providers, BinDir: o.CredentialProviderBinDir,
		Command: containerd.HostExec{Root: o.HostRoot}.Command, Fallback: authn.DefaultKeychain}, nil
}
