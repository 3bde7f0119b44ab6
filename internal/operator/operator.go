// Package operator builds brewlet-operator: a controller-runtime manager with leader
// election, /metrics, /healthz and /readyz, and one controller per kind (the RuntimeImage
// controller, internal/operator/runtimeimage, the NodeProfile controller,
// internal/operator/nodeprofile, and, when enabled, rotation restarts,
// internal/operator/restarts).
package operator

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/internal/metricsauth"
	"brewlet.sh/brewlet/internal/operator/nodeprofile"
	"brewlet.sh/brewlet/internal/operator/nodereports"
	"brewlet.sh/brewlet/internal/operator/restarts"
	"brewlet.sh/brewlet/internal/operator/retirement"
	"brewlet.sh/brewlet/internal/operator/runtimeclass"
	"brewlet.sh/brewlet/internal/operator/runtimeimage"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/signature"
)

// DefaultLeaderElectionID is the name of the coordination Lease the replicas compete for.
const DefaultLeaderElectionID = "brewlet-operator"

// Options configure the manager. Zero values are production defaults where one exists.
type Options struct {
	// MetricsAddress serves Prometheus /metrics over HTTPS, to callers the API server
	// authenticates and authorizes for get /metrics ("0" turns it off).
	MetricsAddress string
	// ProbeAddress serves /healthz and /readyz ("" or "0" turns them off).
	ProbeAddress string
	// PprofAddress serves Go's /debug/pprof ("" or "0": off, the default): for profiling
	// a large fleet's operator; bind it to loopback.
	PprofAddress string
	// LeaderElection lets only one replica reconcile at a time. Correctness does not rest
	// on it (every write is conditional on the resourceVersion it was decided from); it
	// keeps replicas from doing the same work twice.
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease (required outside a cluster).
	LeaderElectionNamespace string
	// LeaderElectionID names the Lease (default DefaultLeaderElectionID).
	LeaderElectionID string
	// LeaseDuration, RenewDeadline, RetryPeriod: client-go leader election timings
	// (zero: controller-runtime's 15s, 10s, 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Logger for the manager and controllers (zero: discard).
	Logger logr.Logger
	// SkipNameValidation allows several managers in one process (tests restart the
	// operator in-process).
	SkipNameValidation bool
	// Admission configures the pod admission webhook (Port 0: off).
	Admission admission.Options
	// AgentNamespace is where the node agents keep their per-node Leases, read as the
	// nodes' heartbeats ("": LeaderElectionNamespace, where the chart runs both).
	AgentNamespace string
	// NodeStaleAfter: a node whose agent has not renewed its Lease for this long (on the
	// operator's clock) is not reporting (0: nodereports.DefaultStaleAfter).
	NodeStaleAfter time.Duration
	// RotationRestarts restarts opted-in workloads after a rotation (off by default).
	RotationRestarts restarts.Options
	// SignatureKeys is a file of PEM public keys: when set, every RuntimeImage digest must
	// be signed by one of them before it is approved (chart value verification.publicKeys).
	SignatureKeys string
	// SignatureIdentities is a JSON list of keyless identities every digest must also be
	// signed by one of (chart value verification.keyless; "" none).
	SignatureIdentities string
	// SignatureTrustedRoot is a Sigstore trusted_root.json for keyless identities ("" none).
	SignatureTrustedRoot string
	// RegistryCAFiles are authorities trusted for registries besides the system's, and
	// InsecureRegistries allows plain HTTP beyond loopback: for reading signatures.
	RegistryCAFiles    []string
	InsecureRegistries bool
}

// signatureChecker builds the RuntimeImage controller's signature checker from o.
func signatureChecker(o Options) (*runtimeimage.SignatureChecker, error) {
	c := &runtimeimage.SignatureChecker{Insecure: o.InsecureRegistries}
	var err error
	if c.Cluster, c.Root, err = signature.LoadCluster(o.SignatureKeys, o.SignatureIdentities, o.SignatureTrustedRoot); err != nil {
		return nil, err
	}
	trust, err := registry.LoadTrust(o.RegistryCAFiles)
	if err != nil {
		return nil, err
	}
	c.Transport = registry.RequireTLS(registry.TransportTLS(registry.Timeouts{}, trust.TLSConfig()), o.InsecureRegistries)
	c.Remote = []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	return c, nil
}

// Scheme returns the types the operator reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := brewletv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// New builds the manager with every controller registered; Start runs it. main and the
// end-to-end tests both call New, so tests run exactly what ships.
func New(ctx context.Context, cfg *rest.Config, o Options) (manager.Manager, error) {
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	mo := manager.Options{
		Scheme: s,
		Logger: o.Logger,
		// Behind TokenReview and SubjectAccessReview (get /metrics), over TLS with a
		// self-signed certificate: metrics name every node and workload (internal/metricsauth).
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddress, SecureServing: true, FilterProvider: metricsauth.Filter},
		HealthProbeBindAddress:  o.ProbeAddress,
		PprofBindAddress:        o.PprofAddress,
		LeaderElection:          o.LeaderElection,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		LeaderElectionID:        o.LeaderElectionID,
		// Lease, not the older ConfigMap locks: the only lock client-go still supports.
		LeaderElectionResourceLock: "leases",
		// A stopping replica hands the Lease over at once instead of making the next one
		// wait a lease duration; safe because writes never rely on being leader.
		LeaderElectionReleaseOnCancel: true,
	}
	if mo.LeaderElectionID == "" {
		mo.LeaderElectionID = DefaultLeaderElectionID
	}
	if o.MetricsAddress == "" {
		mo.Metrics.BindAddress = "0"
	}
	if o.ProbeAddress == "0" {
		mo.HealthProbeBindAddress = ""
	}
	for _, d := range []struct {
		v   time.Duration
		dst **time.Duration
	}{{o.LeaseDuration, &mo.LeaseDuration}, {o.RenewDeadline, &mo.RenewDeadline}, {o.RetryPeriod, &mo.RetryPeriod}} {
		if d.v > 0 {
			v := d.v
			*d.dst = &v
		}
	}
	agentNS := o.AgentNamespace
	if agentNS == "" {
		agentNS = o.LeaderElectionNamespace
	}
	mo.Cache.ByObject = map[client.Object]cache.ByObject{}
	if agentNS != "" {
		// Only the agents' namespace: Leases elsewhere are none of the operator's business.
		mo.Cache.ByObject[&coordinationv1.Lease{}] = cache.ByObject{Namespaces: map[string]cache.Config{agentNS: {}}}
	}
	if rr := o.RotationRestarts; rr.Enabled {
		// Pods cost little: only what restarts read is kept. Limited to namespaces,
		// workloads and pods elsewhere are not even read (the chart then grants the rights
		// per namespace only).
		var ns map[string]cache.Config
		if len(rr.Namespaces) > 0 {
			ns = map[string]cache.Config{}
			for _, n := range rr.Namespaces {
				ns[n] = cache.Config{}
			}
		}
		for _, obj := range []client.Object{&appsv1.Deployment{}, &appsv1.StatefulSet{}, &appsv1.DaemonSet{}} {
			mo.Cache.ByObject[obj] = cache.ByObject{Namespaces: ns}
		}
		mo.Cache.ByObject[&corev1.Pod{}] = cache.ByObject{Namespaces: ns, Transform: restarts.StripPod}
	}
	mgr, err := manager.New(cfg, mo)
	if err != nil {
		return nil, fmt.Errorf("brewlet-operator manager: %w", err)
	}
	// One clock for both controllers: a node is fresh or stale for both alike.
	beats := nodereports.NewHeartbeatClock(agentNS)
	beats.StaleAfter = o.NodeStaleAfter
	if err := beats.Start(ctx, mgr.GetCache()); err != nil {
		return nil, fmt.Errorf("agent Lease informer: %w", err)
	}
	sigs, err := signatureChecker(o)
	if err != nil {
		return nil, fmt.Errorf("signature verification: %w", err)
	}
	if err := runtimeimage.Setup(ctx, mgr, o.SkipNameValidation, beats, sigs); err != nil {
		return nil, fmt.Errorf("RuntimeImage controller: %w", err)
	}
	if err := restarts.Setup(ctx, mgr, o.RotationRestarts, beats, o.SkipNameValidation); err != nil {
		return nil, fmt.Errorf("rotation restarts: %w", err)
	}
	if err := nodeprofile.Setup(ctx, mgr, o.SkipNameValidation, beats, agentNS); err != nil {
		return nil, fmt.Errorf("NodeProfile controller: %w", err)
	}
	if err := runtimeclass.Setup(mgr, o.SkipNameValidation); err != nil {
		return nil, fmt.Errorf("RuntimeClass controller: %w", err)
	}
	if err := retirement.Setup(mgr, o.SkipNameValidation); err != nil {
		return nil, fmt.Errorf("NodeRetirementEvidence controller: %w", err)
	}
	if _, err := admission.Setup(mgr, o.Admission); err != nil {
		return nil, fmt.Errorf("pod admission: %w", err)
	}
	// healthz: the process serves. readyz: the informers are synced, so a replica that
	// cannot see the API server is not reported ready.
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("informers", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("informer caches not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}
