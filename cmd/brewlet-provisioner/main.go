// Command brewlet-provisioner is Brewlet's node agent: it installs the runtimes a node's
// NodeProfile offers, keeps their authorizations, registers the brewlet handler with
// containerd and reports the node's state. It runs as a privileged DaemonSet.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"brewlet.sh/brewlet/internal/provisioner"
	"brewlet.sh/brewlet/internal/vocab"
)

func main() {
	o := provisioner.Options{}
	flag.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (downward API)")
	flag.StringVar(&o.Namespace, "namespace", envOr("POD_NAMESPACE", "brewlet-system"), "namespace of the node's writer lease")
	flag.StringVar(&o.Identity, "identity", envOr("POD_NAME", "agent")+"_"+os.Getenv("POD_UID"), "unique identity of this agent process")
	flag.StringVar(&o.PodUID, "pod-uid", os.Getenv("POD_UID"), "this agent's pod UID (downward API), reported in NodeRuntime status")
	flag.StringVar(&o.HostPrefix, "host-prefix", "", "relocate /opt/brewlet, /var/lib/brewlet and /run/brewlet under this directory")
	flag.DurationVar(&o.AuthTTL, "authorization-ttl", 5*time.Minute, "authorization lifetime without a fresh confirmation from the API server (at most 5m)")
	flag.DurationVar(&o.Period, "period", 0, "pause between passes (default: a fifth of the authorization TTL; at most half of it)")
	flag.StringVar(&o.ContainerdRestart, "containerd-restart", "validated", "validated: register the handler, restart containerd on change, roll back on failure; none: change nothing")
	flag.StringVar(&o.ContainerdConfig, "containerd-config", "/etc/containerd/config.toml", "containerd's main config")
	flag.StringVar(&o.ContainerdConfigTemplate, "containerd-config-template", "auto", "the template a distribution renders containerd's config from (k3s, RKE2): auto (found beside a k3s or RKE2 config), a path, or none")
	flag.StringVar(&o.ContainerdBinary, "containerd-binary", "containerd", "containerd binary, for 'config dump'")
	flag.StringVar(&o.HostRoot, "host-root", "", "the node's root filesystem mounted into the agent (the chart's /host): containerd's binary and the restart command run chrooted into it (empty: in the agent's own filesystem)")
	flag.StringVar(&o.ContainerdSocket, "containerd-socket", "/run/containerd/containerd.sock", "containerd's gRPC socket (CRI health check)")
	flag.StringVar(&o.ContainerdRestartCommand, "containerd-restart-command", "systemctl restart containerd", "command that restarts containerd")
	flag.StringVar(&o.ShimSource, "shim-source", "/usr/local/bin/containerd-shim-brewlet-v2", "shim binary shipped with the agent")
	flag.StringVar(&o.ShimDir, "shim-dir", "", "host directory on containerd's PATH to install the shim into (empty: do not install)")
	flag.DurationVar(&o.GCGrace, "gc-grace", time.Hour, "keep unused generations and layers this long (provisioner.gc.grace)")
	flag.StringVar(&o.MountInfo, "mountinfo", "/proc/1/mountinfo", "the host's mount table (needs hostPID), consulted before removing layers")
	flag.StringVar(&o.MetricsAddress, "metrics-address", "", "serve Prometheus /metrics here, e.g. :9464 (empty: off; metrics.enabled in the chart)")
	flag.Func("registry-mirror", "REGISTRY=MIRROR: pull REGISTRY's images from MIRROR first (repeatable, tried in order; digests are verified)", func(v string) error {
		reg, mirror, ok := strings.Cut(v, "=")
		if !ok || reg == "" || mirror == "" {
			return fmt.Errorf("want REGISTRY=MIRROR, e.g. registry.example=mirror.local:5000")
		}
		if o.Mirrors == nil {
			o.Mirrors = map[string][]string{}
		}
		o.Mirrors[reg] = append(o.Mirrors[reg], mirror)
		return nil
	})
	startupTaints := flag.String("startup-taints", vocab.TaintRuntimeNotReady, "comma-separated taint keys a node joining a pool registers with; removed once the node can start Brewlet containers (empty: none)")
	flag.BoolVar(&o.InsecureRegistries, "insecure-registries", false, "allow plain HTTP to non-loopback registries")
	flag.Func("registry-ca-file", "a PEM file of authorities trusted for registries besides the system's (repeatable; chart value registry.caBundle)", func(v string) error {
		o.RegistryCAFiles = append(o.RegistryCAFiles, v)
		return nil
	})
	flag.StringVar(&o.CredentialProviderConfig, "image-credential-provider-config", "", "the node's kubelet CredentialProviderConfig (a node path; below --host-root when set); empty: none")
	flag.StringVar(&o.CredentialProviderBinDir, "image-credential-provider-bin-dir", "", "the node's kubelet credential provider plugin directory (a node path; plugins run chrooted into --host-root when set)")
	flag.StringVar(&o.SignatureKeys, "signature-keys", "", "a file of PEM public keys; every runtime digest must be signed by one of them before this node installs it (chart value verification.publicKeys; empty: only what each RuntimeImage's spec.verification requires)")
	flag.StringVar(&o.SignatureIdentities, "signature-identities", "", "a JSON list of keyless identities ({issuer, subject | subjectRegExp}) that, like the keys of --signature-keys, may each meet the cluster's signature requirement (chart value verification.keyless; needs --signature-trusted-root)")
	flag.StringVar(&o.SignatureTrustedRoot, "signature-trusted-root", "", "a Sigstore trusted_root.json that keyless signing certificates (spec.verification.keyless) are checked against (chart value verification.trustedRoot)")
	flag.StringVar(&o.RegistryHostsDir, "registry-hosts-dir", "", "the node's containerd registry configuration directory (CRI's registry config_path, e.g. /etc/containerd/certs.d); empty: none")
	flag.Parse()
	for _, k := range strings.Split(*startupTaints, ",") {
		if k = strings.TrimSpace(k); k != "" {
			o.StartupTaints = append(o.StartupTaints, k)
		}
	}
	if o.ContainerdConfigTemplate == "none" {
		o.ContainerdConfigTemplate = ""
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := provisioner.Main(ctx, o); err != nil {
		log.Fatal(err)
	}
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}
