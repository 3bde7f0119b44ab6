// Package firsthour is a platform team's and a developer's first hour with Brewlet, on a real
// cluster (test/cluster): build and publish Brewlet's images and a runtime, install the
// chart with helm, approve the runtime for the node pool, publish an application that holds
// only /app, run it as a Deployment behind a Service, and rotate the runtime to a new
// generation. `make demo` runs it and leaves the cluster up; the top test tier runs the same
// steps and then checks more.
package firsthour

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/internal/signature"
	"brewlet.sh/brewlet/test/cluster"
	"brewlet.sh/brewlet/test/framework"
)

// Names of what the walk-through creates.
const (
	Release      = "brewlet"
	Namespace    = "brewlet-system" // the chart's release namespace
	AppNamespace = "demo"
	App          = "hello-web"
	RuntimeID    = "python" // the RuntimeImage the app runs on
	Profile      = "local"  // the NodeProfile of the cluster's one pool
	ImageTag     = "local"  // tag next to the digests of Brewlet's own images
	RuntimeUID   = 10001    // the runtime image's account (hack/runtimes.sh)
	waitLong     = 5 * time.Minute
	pollInterval = 500 * time.Millisecond
)

// Flow runs the steps against one cluster and keeps what they produced.
type Flow struct {
	T        framework.TB
	C        *cluster.Cluster
	Root     string // the repository
	Out      io.Writer
	Progress *Progress
	Clients  Clients

	// Spread makes AppDeployment place its replicas on different nodes.
	Spread bool
	// Values are chart values merged over the ones a local cluster needs (maps merge key by
	// key, anything else replaces).
	Values map[string]any

	Images   map[string]string // component name -> repo@sha256 in the node's registry
	Runtimes map[string]string // python1, python2 -> repo@sha256
	AppImage string
	// SigningKey is the PEM public key the runtimes are signed with (signRuntimes).
	SigningKey string
	signer     *signature.Signer
}

// Progress numbers steps and prints each with its outcome and duration.
type Progress struct {
	Out      io.Writer
	N, Total int
}

// Do runs one step; a failing step fails t.
func (p *Progress) Do(t framework.TB, name string, run func() (string, error)) {
	t.Helper()
	p.N++
	if p.Total < p.N {
		p.Total = p.N
	}
	fmt.Fprintf(p.Out, "[%d/%d] %s\n", p.N, p.Total, name)
	start := time.Now()
	out, err := run()
	took := time.Since(start).Round(100 * time.Millisecond)
	if err != nil {
		t.Fatalf("step %d (%s) failed after %s: %v", p.N, name, took, err)
	}
	if out = strings.TrimRight(out, "\n"); out != "" {
		fmt.Fprintf(p.Out, "      %s\n", strings.ReplaceAll(out, "\n", "\n      "))
	}
	fmt.Fprintf(p.Out, "      done in %s\n", took)
}

// Clients talk to the cluster as cluster-admin.
type Clients struct {
	CS kubernetes.Interface
	CL client.Client
}

// New prepares a flow; it fails t when the cluster's API server cannot be reached.
func New(t framework.TB, c *cluster.Cluster, out io.Writer) *Flow {
	t.Helper()
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatalf("cluster config: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: framework.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return &Flow{T: t, C: c, Root: framework.RepoRoot(t), Out: out, Progress: &Progress{Out: out}, Clients: Clients{CS: cs, CL: cl}}
}

// Step is one numbered step of the walk-through.
type Step struct {
	Name string
	Run  func(ctx context.Context) (string, error) // returns what to show the user
}

// Steps are the walk-through in order.
func (f *Flow) Steps() []Step {
	return []Step{
		{"Build Brewlet's operator and provisioner images and push them to the node's registry", f.buildImages},
		{"Build the CPython runtime from Debian packages: bookworm (generation 1) and its security update (generation 2)", f.buildRuntimes},
		{"Sign both generations with a key made for this cluster (the chart requires its signature)", f.signRuntimes},
		{"Install the Helm chart (CRDs, operator, node agent on pool " + cluster.PoolName + ", admission)", f.installChart},
		{"Approve the CPython runtime (RuntimeImage " + RuntimeID + ") for the node pool (NodeProfile " + Profile + ")", f.approveRuntime},
		{"Publish the web app: an image holding only /app", f.publishApp},
		{"Deploy it: runtimeClassName brewlet, no securityContext", f.deployApp},
		{"Ask the app through its Service", f.ask},
		{"Rotate the runtime to generation 2, the security update (one digest change, no app rebuilt)", f.rotate},
		{"The operator restarts the app (it opted in) onto generation 2; ask again", f.restartApp},
	}
}

// StepCount is the number of steps Run runs.
func StepCount() int { return len((&Flow{}).Steps()) }

// Run runs every step in order.
func (f *Flow) Run(ctx context.Context) {
	f.T.Helper()
	steps := f.Steps()
	if f.Progress.Total == 0 {
		f.Progress.Total = f.Progress.N + len(steps)
	}
	for _, s := range steps {
		f.Do(ctx, s)
	}
}

// Do runs one step as the next numbered one.
func (f *Flow) Do(ctx context.Context, s Step) {
	f.T.Helper()
	f.Progress.Do(f.T, s.Name, func() (string, error) { return s.Run(ctx) })
}

// poll calls cond until it reports done, ctx ends or timeout passes; the error then carries
// cond's last explanation.
func poll(ctx context.Context, timeout time.Duration, cond func(ctx context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		done, why, err := cond(ctx)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("not done after %s: %s", timeout, last)
		case <-time.After(pollInterval):
		}
	}
}
