package provisioner

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"time"

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
	"brewlet.sh/brewlet/internal/vocab"
)

// Options configure the node agent (the brewlet-provisioner command's flags).
type Options struct {
	NodeName, Namespace, Identity, HostPrefix  string
	PodUID                                     string // the agent pod's UID, reported as agentPodUID
	AuthTTL, Period                            time.Duration
	ContainerdRestart                          string // validated | none
	ContainerdConfig, ContainerdBinary         string
	ContainerdSocket, ContainerdRestartCommand string
	ShimSource, ShimDir                        string
	InsecureRegistries                         bool
	GCGrace                                    time.Duration // provisioner.gc.grace
	MountInfo                                  string        // the host's mount table
	MetricsAddress                             string        // "" disables /metrics
	Mirrors                                    map[string][]string
}

// Scheme has the types the agent reads and writes.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = brewletv1.AddToScheme(s)
	return s
}

// Main runs the agent until ctx ends: it waits for the node's writer lease, installs the
// shim, registers the handler with containerd (mode validated), then reconciles.
func Main(ctx context.Context, o Options) error {
	if o.NodeName == "" {
		return errors.New("--node-name (or NODE_NAME) is required")
	}
	if o.ContainerdRestart != string(vocab.ContainerdRestartValidated) && o.ContainerdRestart != string(vocab.ContainerdRestartNone) {
		return fmt.Errorf("--containerd-restart must be validated or none, not %q", o.ContainerdRestart)
	}
	// Refused before anything runs: a TTL above the cap would keep a disconnected node
	// starting containers for longer than SPEC.md §5.3 allows.
	if err := ValidateTiming(o.AuthTTL, o.Period); err != nil {
		return err
	}
	if o.GCGrace < 0 {
		return vocab.Errorf(vocab.ReasonLimitExceeded, "--gc-grace (provisioner.gc.grace) is %s; it must be 0 or more", o.GCGrace)
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	layout := hoststate.DefaultLayout
	if o.HostPrefix != "" {
		layout = hoststate.Under(o.HostPrefix)
	}
	agent := &Agent{Client: c, NodeName: o.NodeName, PodUID: types.UID(o.PodUID), Layout: layout, AuthTTL: o.AuthTTL, Period: o.Period,
		Installer: &Installer{Layout: layout, Insecure: o.InsecureRegistries, Mirrors: o.Mirrors,
			Platform: v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}},
		Collector: &Collector{Layout: layout, Grace: o.GCGrace, MountInfo: o.MountInfo},
		Tasks:     &ContainerdTasks{Socket: o.ContainerdSocket},
		Log:       log.Printf}
	wake := make(chan struct{}, 1)
	view, err := NewView(cfg, Scheme(), c)
	if err != nil {
		return err
	}
	if err := view.Start(ctx, wake); err != nil {
		return err
	}
	agent.View = view
	go Wakeup{Client: c, NodeName: o.NodeName, Log: log.Printf}.Run(ctx, wake)
	agent.Wake = wake
	if o.MetricsAddress != "" {
		reg := prometheus.NewRegistry()
		agent.Metrics = NewMetrics(layout, reg)
		reg.MustRegister(view.Collectors()...)
		srv := &http.Server{Addr: o.MetricsAddress, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Printf("metrics: %v", err)
			}
		}()
		defer func() { _ = srv.Close() }()
	}
	return WriterLease{Client: cs, Namespace: o.Namespace, NodeName: o.NodeName, Identity: o.Identity}.
		Run(ctx, func(ctx context.Context, isWriter func() bool) {
			agent.IsWriter = isWriter
			if !isWriter() { // the shim and containerd's config are host changes too
				return
			}
			agent.Host = o.prepareHost(ctx, ContainerdMode(ctx, c, o.NodeName, vocab.ContainerdRestart(o.ContainerdRestart)))
			if err := agent.Run(ctx); err != nil {
				log.Printf("agent: %v", err)
			}
		})
}

// ContainerdMode is the containerd registration mode for this node: the one brewlet-operator
// wrote into the node's NodeRuntime spec (copied from its NodeProfile), else flag (the
// --containerd-restart default: no operator, the operator not yet there, or the object not
// readable). It is read once, when the agent takes the node's writer lease, because
// registering the handler restarts containerd: a changed mode applies at the agent's next
// start, never mid-flight.
func ContainerdMode(ctx context.Context, c client.Reader, nodeName string, flag vocab.ContainerdRestart) vocab.ContainerdRestart {
	nrt := &brewletv1.NodeRuntime{}
	if err := c.Get(ctx, client.ObjectKey{Name: nodeName}, nrt); err != nil {
		return flag
	}
	switch m := vocab.ContainerdRestart(nrt.Spec.ContainerdRestart); m {
	case vocab.ContainerdRestartValidated, vocab.ContainerdRestartNone:
		return m
	}
	return flag
}

// prepareHost installs the shim and registers the handler (mode validated), reporting both
// on NodeRuntime.
func (o Options) prepareHost(ctx context.Context, mode vocab.ContainerdRestart) *brewletv1.NodeCleanup {
	cd := &Containerd{ConfigPath: o.ContainerdConfig, Binary: o.ContainerdBinary,
		Restart: func(ctx context.Context) error {
			out, err := exec.CommandContext(ctx, "sh", "-c", o.ContainerdRestartCommand).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s: %v: %s", o.ContainerdRestartCommand, err, out)
			}
			return nil
		},
		Health: HandlerHealth(o.ContainerdSocket)}
	return PrepareHost(ctx, cd, mode, o.ShimSource, o.ShimDir)
}

// PrepareHost installs the shim (when shimDir is set) and, in mode validated, registers the
// brewlet handler with containerd. Mode none changes nothing. A failure leaves containerd
// as it was (rolled back) and is reported in the returned record, which the agent publishes
// as NodeRuntime status.cleanup.
func PrepareHost(ctx context.Context, cd *Containerd, mode vocab.ContainerdRestart, shimSrc, shimDir string) *brewletv1.NodeCleanup {
	rep := &brewletv1.NodeCleanup{}
	var msgs []string
	if shimDir != "" {
		if _, err := InstallShim(shimSrc, shimDir); err != nil {
			msgs = append(msgs, "shim not installed: "+err.Error())
		} else {
			rep.ShimInstalled = true
		}
	}
	if mode == vocab.ContainerdRestartValidated {
		if ch, err := cd.Ensure(ctx); err != nil {
			msgs = append(msgs, err.Error())
		} else {
			rep.ContainerdHandlerRegistered = true
			if ch.Restarted {
				log.Printf("registered the brewlet handler in %s and restarted containerd", ch.File)
			}
		}
	}
	rep.Message = strings.Join(msgs, "; ")
	if rep.Message != "" {
		log.Printf("host preparation: %s", rep.Message)
	}
	return rep
}
