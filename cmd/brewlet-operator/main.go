// Command brewlet-operator runs Brewlet's cluster controllers (docs/operator.md).
// `brewlet-operator uninstall` is the chart's pre-delete hook (docs/uninstall.md).
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	// The operator's image has no zone database; restart windows name IANA time zones.
	_ "time/tzdata"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/internal/operator"
	"brewlet.sh/brewlet/internal/operator/nodereports"
	"brewlet.sh/brewlet/internal/operator/restarts"
	"brewlet.sh/brewlet/internal/uninstall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "uninstall" {
		os.Exit(uninstallMain(os.Args[2:]))
	}
	o := operator.Options{}
	flag.StringVar(&o.MetricsAddress, "metrics-address", ":8080", "serve Prometheus /metrics here (0: off)")
	flag.StringVar(&o.ProbeAddress, "health-probe-address", ":8081", "serve /healthz and /readyz here (0: off)")
	flag.StringVar(&o.PprofAddress, "pprof-address", "", "serve Go's /debug/pprof here, e.g. 127.0.0.1:6060 (default: off)")
	flag.BoolVar(&o.LeaderElection, "leader-elect", true, "run controllers only while holding the leader Lease")
	flag.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", envOr("POD_NAMESPACE", "brewlet-system"), "namespace of the leader Lease")
	flag.StringVar(&o.LeaderElectionID, "leader-election-id", operator.DefaultLeaderElectionID, "name of the leader Lease")
	flag.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a leader's Lease stays valid without renewal (failover takes up to this long)")
	flag.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "a leader that cannot renew within this long stops reconciling")
	flag.DurationVar(&o.RetryPeriod, "leader-election-retry-period", 2*time.Second, "how often candidates try to take the Lease")
	flag.BoolVar(&o.RotationRestarts.Enabled, "rotation-restarts", false, "restart opted-in workloads (annotation brewlet.sh/restart-on-rotation) once a rotation reached every node")
	flag.IntVar(&o.RotationRestarts.MaxConcurrent, "rotation-restart-max-concurrent", 5, "at most this many workloads restarting at once")
	flag.DurationVar(&o.RotationRestarts.ProgressDeadline, "rotation-restart-progress-deadline", 10*time.Minute, "a restart not rolled out by then is reported Failed and frees its slot")
	flag.DurationVar(&o.RotationRestarts.Soak, "rotation-restart-soak", 0, "restarts start this long after a rotation completed (the new generation soaks on new pods first; counted from rotationCompletedAt, so operator restarts do not extend it)")
	window := flag.String("rotation-restart-window", "", "restarts start only in windows opening at this cron schedule (minute hour day-of-month month day-of-week, or @daily…; default: any time)")
	windowFor := flag.Duration("rotation-restart-window-duration", 0, "how long each restart window stays open (1m to 168h; with --rotation-restart-window)")
	windowTZ := flag.String("rotation-restart-window-time-zone", "UTC", "IANA time zone the restart window's schedule is read in")
	flag.IntVar(&o.RotationRestarts.MaxFailures, "rotation-restart-max-failures", 1, "once more restarts of one rotation failed, no further restart starts until a new digest (0: the first failure halts)")
	flag.Func("rotation-restart-namespaces", "comma-separated namespaces to restart workloads in (default: all)", func(v string) error {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				o.RotationRestarts.Namespaces = append(o.RotationRestarts.Namespaces, n)
			}
		}
		return nil
	})
	flag.DurationVar(&o.NodeStaleAfter, "node-stale-after", nodereports.DefaultStaleAfter, "a node whose agent has not renewed its Lease for this long (on this process's clock) is not reporting: its containers show current=false and its report proves nothing for restarts (at least 10s; agents renew theirs every 3s)")
	flag.StringVar(&o.SignatureKeys, "signature-keys", "", "a file of PEM public keys; every RuntimeImage digest must be signed by one of them before it is approved (chart value verification.publicKeys; empty: only what spec.verification requires)")
	flag.StringVar(&o.SignatureIdentities, "signature-identities", "", "a JSON list of keyless identities ({issuer, subject | subjectRegExp}) that, like the keys of --signature-keys, may each meet the cluster's signature requirement (chart value verification.keyless; needs --signature-trusted-root)")
	flag.StringVar(&o.SignatureTrustedRoot, "signature-trusted-root", "", "a Sigstore trusted_root.json that keyless signing certificates (spec.verification.keyless) are checked against (chart value verification.trustedRoot)")
	flag.Func("registry-ca-file", "a PEM file of authorities trusted for registries besides the system's, for reading signatures (repeatable; chart value registry.caBundle)", func(v string) error {
		o.RegistryCAFiles = append(o.RegistryCAFiles, v)
		return nil
	})
	flag.BoolVar(&o.InsecureRegistries, "insecure-registries", false, "allow plain HTTP to non-loopback registries when reading signatures")
	flag.IntVar(&o.Admission.Port, "webhook-port", 9443, "serve pod admission (HTTPS) on this port (0: off)")
	flag.StringVar(&o.Admission.Host, "webhook-host", "", "serve pod admission on this address (default: all)")
	flag.StringVar(&o.Admission.CertDir, "webhook-cert-dir", "", "write the pod admission serving certificate here (default: <tmp>/k8s-webhook-server/serving-certs)")
	flag.DurationVar(&o.Admission.ResyncInterval, "webhook-cert-resync", time.Minute, "check the serving certificate Secret and the webhook caBundle this often")
	flag.Func("user-namespaces", "Brewlet pods' user namespaces: empty (each pod decides), Default (hostUsers: false unless the pod sets it) or Required (also refuse hostUsers: true); chart value admission.userNamespaces", func(v string) error {
		p, err := admission.ParseUserNamespaces(v)
		o.Admission.UserNamespaces = p
		return err
	})
	flag.Parse()
	if o.NodeStaleAfter < 10*time.Second {
		fmt.Fprintf(os.Stderr, "--node-stale-after=%s: at least 10s (agents renew their Lease every 3s; shorter marks live nodes as not reporting)\n", o.NodeStaleAfter)
		os.Exit(2)
	}
	w, err := restarts.ParseWindow(*window, *windowFor, *windowTZ)
	if err != nil {
		fmt.Fprintf(os.Stderr, "--rotation-restart-window: %v\n", err)
		os.Exit(2)
	}
	o.RotationRestarts.Window = w
	// The certificate Secret lives beside the Lease, in the operator's own namespace.
	o.Admission.Namespace = o.LeaderElectionNamespace

	o.Logger = logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil))
	ctrl.SetLogger(o.Logger)
	ctx := ctrl.SetupSignalHandler()
	mgr, err := operator.New(ctx, direct(ctrl.GetConfigOrDie()), o)
	if err != nil {
		o.Logger.Error(err, "start brewlet-operator")
		os.Exit(1)
	}
	if err := mgr.Start(ctx); err != nil {
		o.Logger.Error(err, "brewlet-operator stopped")
		os.Exit(1)
	}
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

// uninstallMain deletes every NodeProfile and RuntimeImage and waits for the nodes'
// cleanup; non-zero (and Helm keeps the release) when it does not finish in time.
func uninstallMain(args []string) int {
	fs := flag.NewFlagSet("uninstall", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Minute, "fail when cleanup has not finished by then")
	poll := fs.Duration("poll", 5*time.Second, "how often to look")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg = direct(cfg)
	scheme, err := operator.Scheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := uninstall.Run(ctrl.SetupSignalHandler(), c, *timeout, *poll, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// direct keeps the API server out of HTTPS_PROXY/HTTP_PROXY (set through the chart's proxy
// values for registries): in-cluster traffic never leaves through an egress proxy.
func direct(cfg *rest.Config) *rest.Config {
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	return cfg
}
