//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/agent"
	"brewlet.sh/brewlet/internal/provisioner/clusterview"
	"brewlet.sh/brewlet/internal/provisioner/tasks"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The agents' steady-state cost to the API server: the real agent loop of many nodes (host
// side on private directories, no installs: runtimes offered on demand) against a real API
// server, before and after RuntimeImages and their status grow. Two ways of reading the
// cluster are compared in the same run: full quorum lists every pass (how agents read
// before the informer view) and informers confirmed by metadata-only quorum reads. The
// figure that must stay flat is bytes per node per pass. BREWLET_AGENT_SCENARIO runs only
// the scenarios whose name starts with it.
func TestBenchAgentLoad(t *testing.T) {
	nodes := envInt("BREWLET_AGENT_NODES", 1000)
	// Full lists of grown status from 1,000 agents would saturate this 2-core machine (that
	// is the point): the old way runs on fewer nodes; the figures are per node.
	directNodes := envInt("BREWLET_AGENT_DIRECT_NODES", 100)
	period := 10 * time.Second
	passes := 3

	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	ctx := context.Background()
	for i := range nodes {
		kit.Must(t, cp.AddFakeNode(ctx, fmt.Sprintf("agent-node-%d", i), map[string]string{vocab.NodeRestrictionPrefix + "pool": "a"}))
	}
	cfg := *cp.Config
	cfg.QPS = -1 // no client-side limit: the API server's load is what is measured
	c, err := client.NewWithWatch(&cfg, client.Options{Scheme: framework.Scheme()})
	kit.Must(t, err)
	kit.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kit.ChartNS}}))
	profile := &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: brewletv1.NodeProfileSpec{NodePool: brewletv1.NodePool{Key: vocab.NodeRestrictionPrefix + "pool", Names: []string{"a"}}}}
	kit.Must(t, c.Create(ctx, profile))

	// Rows are printed as each phase ends: a long run cut short still leaves its figures.
	fmt.Println("| cluster | one RuntimeImage's JSON | agents read with | nodes | passes measured | requests / pass | response bytes / pass | watch bytes / pass | fallbacks / confirmed passes |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, sc := range []struct {
		name          string
		images, nodes int // runtime images; nodes with task observations in each status
	}{{"1 RuntimeImage, small status", 1, 0}, {"10 RuntimeImages, small status", 10, 0},
		{"10 RuntimeImages, status at its bounds (50 nodes × 20 tasks)", 10, 50}} {
		if only := os.Getenv("BREWLET_AGENT_SCENARIO"); only != "" && !strings.HasPrefix(sc.name, only) {
			continue
		}
		size := growRuntimeImages(t, cp, c, profile, sc.images, sc.nodes)
		for _, mode := range []struct {
			name  string
			view  bool
			nodes int
		}{{"full lists", false, min(directNodes, nodes)}, {"informers + metadata read", true, nodes}} {
			r := runAgents(t, cp, &cfg, c, mode.nodes, sc.images, mode.view, period, passes)
			// Every pass reads its node exactly once: the passes the agents really ran.
			perPass := max(r.byVerb["GET nodes"], 1)
			fmt.Printf("| %s | %d B | %s | %d | %.0f | %.2f | %.0f | %.0f | %d/%d |\n", sc.name, size, mode.name, mode.nodes, perPass,
				r.requests/perPass, r.responseBytes/perPass, r.watchBytes/perPass, r.fallbacks, r.confirmed)
			t.Logf("%s, %s: %d errors; requests by verb %v", sc.name, mode.name, r.errors, r.byVerb)
		}
	}
}

// growRuntimeImages makes the cluster hold n approved RuntimeImages, all offered on demand
// by the profile, each with status task observations for obsNodes nodes of 20 bindings (the
// CRD's bounds), written as brewlet-operator would. It returns one object's JSON size.
func growRuntimeImages(t *testing.T, cp *framework.ControlPlane, c client.Client, profile *brewletv1.NodeProfile, n, obsNodes int) int {
	ctx := context.Background()
	kit.Must(t, c.Get(ctx, client.ObjectKeyFromObject(profile), profile))
	profile.Spec.RuntimeImages = nil
	for i := range n {
		id := fmt.Sprintf("bench-%02d", i)
		profile.Spec.RuntimeImages = append(profile.Spec.RuntimeImages, brewletv1.OfferedRuntime{ID: id, Install: string(vocab.InstallOnDemand)})
		ri := &brewletv1.RuntimeImage{}
		if err := c.Get(ctx, client.ObjectKey{Name: id}, ri); err != nil {
			ri = kit.RuntimeImage(id, "registry.example/bench@"+kit.GoodDigest)
			kit.Must(t, c.Create(ctx, ri))
		}
		now := metav1.Now()
		ri.Status.Epoch, ri.Status.Generation, ri.Status.Digest, ri.Status.ObservedGeneration = ri.UID, 1, kit.GoodDigest, ri.Generation
		meta.SetStatusCondition(&ri.Status.Conditions, metav1.Condition{Type: string(vocab.ConditionApproved), Status: metav1.ConditionTrue,
			Reason: "Approved", Message: "approved by the bench", ObservedGeneration: ri.Generation})
		ri.Status.TaskObservations = nil
		for nd := range obsNodes {
			o := brewletv1.TaskObservation{NodeName: fmt.Sprintf("agent-node-%d", nd), NodeUID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", nd)),
				Current: true, ObservedAt: now}
			for b := range 20 {
				o.Bindings = append(o.Bindings, brewletv1.TaskBinding{PodNamespace: "apps", PodName: fmt.Sprintf("web-7d9f8c6b5-%05d", nd*20+b),
					PodUID: types.UID(fmt.Sprintf("11111111-2222-3333-4444-%012d", nd*20+b)), ContainerName: "app", Epoch: ri.UID, Generation: 1})
			}
			ri.Status.TaskObservations = append(ri.Status.TaskObservations, o)
		}
		kit.Must(t, c.Status().Update(ctx, ri))
	}
	kit.Must(t, c.Update(ctx, profile))
	raw, err := kubernetes.NewForConfigOrDie(cp.Config).RESTClient().Get().AbsPath("/apis", brewletv1.GroupVersion.Group, brewletv1.GroupVersion.Version, "runtimeimages", "bench-00").DoRaw(ctx)
	kit.Must(t, err)
	return len(raw)
}

type agentLoad struct {
	requests, responseBytes, watchBytes float64
	byVerb                              map[string]float64
	fallbacks, confirmed                int64
	errors                              int64
}

// runAgents runs n agents for one warm-up pass (NodeRuntime created, labels set) and then
// `passes` periods, and returns the API server's counters over the measured periods for
// the resources agents read and write.
func runAgents(t *testing.T, cp *framework.ControlPlane, cfg *rest.Config, c client.WithWatch, n, images int, useView bool, period time.Duration, passes int) agentLoad {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var errs atomic.Int64
	var views []*clusterview.View
	defer func() { stop(); wg.Wait() }()
	agents := make([]*agent.Agent, n)
	wakes := make([]chan struct{}, n)
	for i := range n {
		dir := t.TempDir()
		layout := hoststate.Under(dir)
		a := &agent.Agent{Client: c, NodeName: fmt.Sprintf("agent-node-%d", i), Layout: layout, AuthTTL: 6 * period, Period: period,
			Tasks: noTasks{}, Log: func(f string, args ...any) {
				if strings.HasPrefix(f, "reconcile") {
					errs.Add(1)
				}
			}}
		agents[i], wakes[i] = a, make(chan struct{}, 1)
		a.Wake = wakes[i]
	}
	if useView {
		// Informers start a few at a time, as a fleet's agents start at different moments.
		views = make([]*clusterview.View, n)
		sem := make(chan struct{}, 4)
		var starting sync.WaitGroup
		var failed atomic.Value
		for i, a := range agents {
			v, err := clusterview.NewView(cfg, framework.Scheme(), c)
			kit.Must(t, err)
			a.View, views[i] = v, v
			starting.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; starting.Done() }()
				if err := v.Start(ctx, wakes[i]); err != nil {
					failed.Store(err)
				}
			}()
		}
		starting.Wait()
		if err, _ := failed.Load().(error); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range agents {
		wake := wakes[i]
		wg.Add(2)
		go func() { defer wg.Done(); clusterview.Wakeup{Client: c, NodeName: a.NodeName}.Run(ctx, wake) }()
		go func() { defer wg.Done(); _ = a.Run(ctx) }()
	}
	// Measured from the first period after every agent reported the scenario's runtimes:
	// the one-time writes (NodeRuntime created, labels, the new entries) are behind it.
	deadline := time.Now().Add(10 * time.Minute)
	for reported(t, c, n, images) < n {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 minutes only %d of %d agents reported %d runtimes", reported(t, c, n, images), n, images)
		}
		time.Sleep(time.Second)
	}
	time.Sleep(period)
	before := apiserverCounters(t, cp)
	var conf0, fall0 int64
	for _, v := range views {
		conf0, fall0 = conf0+v.Confirmed.Load(), fall0+v.Fallbacks.Load()
	}
	time.Sleep(time.Duration(passes) * period)
	after := apiserverCounters(t, cp)
	r := agentLoad{byVerb: map[string]float64{}, errors: errs.Load()}
	for k, v := range after {
		d := v - before[k]
		switch {
		case strings.HasPrefix(k, "requests/"):
			r.requests += d
			r.byVerb[strings.TrimPrefix(k, "requests/")] += d
		case strings.HasPrefix(k, "response/"):
			r.responseBytes += d
		case strings.HasPrefix(k, "watch/"):
			r.watchBytes += d
		}
	}
	for _, v := range views {
		r.confirmed, r.fallbacks = r.confirmed+v.Confirmed.Load(), r.fallbacks+v.Fallbacks.Load()
	}
	r.confirmed, r.fallbacks = r.confirmed-conf0, r.fallbacks-fall0
	return r
}

// reported counts the first n agents whose NodeRuntime lists `images` runtimes.
func reported(t *testing.T, c client.Client, n, images int) int {
	var l brewletv1.NodeRuntimeList
	if err := c.List(context.Background(), &l); err != nil {
		// A thousand informers syncing at once can keep the API server from answering.
		t.Logf("list NodeRuntimes: %v (retrying)", err)
		return 0
	}
	got := 0
	for _, nrt := range l.Items {
		var i int
		if _, err := fmt.Sscanf(nrt.Name, "agent-node-%d", &i); err == nil && i < n && len(nrt.Status.Runtimes) == images {
			got++
		}
	}
	return got
}

type noTasks struct{}

func (noTasks) List(context.Context) (map[string]tasks.State, []string, error) {
	return map[string]tasks.State{}, nil, nil
}

func (noTasks) Get(context.Context, string) (tasks.State, error) {
	return tasks.Absent, nil
}

// agentResources are what agents read and write; the counters of everything else (the
// API server's own controllers) are left out.
var agentResources = map[string]bool{"nodes": true, "nodeprofiles": true, "runtimeimages": true, "noderuntimes": true, "leases": true}

// apiserverCounters reads kube-apiserver's /metrics: requests by verb, response bytes and
// watch event bytes, summed over agentResources.
func apiserverCounters(t *testing.T, cp *framework.ControlPlane) map[string]float64 {
	t.Helper()
	raw, err := kubernetes.NewForConfigOrDie(cp.Config).RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	kit.Must(t, err)
	out := map[string]float64{}
	for _, s := range scrape(t, string(raw), "apiserver_request_total", "apiserver_response_sizes_sum", "apiserver_watch_events_sizes_sum") {
		l := s.labels
		if !agentResources[l["resource"]] {
			continue
		}
		switch s.metric {
		case "apiserver_request_total":
			out["requests/"+l["verb"]+" "+l["resource"]] += s.value
		case "apiserver_response_sizes_sum":
			out["response/"+l["verb"]+" "+l["resource"]] += s.value
		case "apiserver_watch_events_sizes_sum":
			out["watch/"+l["resource"]] += s.value
		}
	}
	return out
}
