//go:build bench

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/restarts"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
)

const (
	fleetNS, fleetID   = "fleet", "python"
	fleetMaxConcurrent = 5
	fleetMaxFailures   = 5     // the 3 failing nodes must not halt the rotation
	fleetMaxUnavail    = "10%" // a wave of a tenth of the pool, as a cautious production profile
)

type fleetConfig struct {
	nodes, workloads, failing, stale int
	renew, minReady, stallGrace      time.Duration // stallGrace: how long RotationComplete may lag the last healthy node
}

func fleetEnv[T int | time.Duration](t *testing.T, name string, def T) T {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if _, isInt := any(def).(int); isInt {
		n, aerr := strconv.Atoi(v)
		d, err = time.Duration(n), aerr
	}
	must(t, err)
	return T(d)
}

// TestBenchFleetRotation rotates one RuntimeImage across a kwok fleet (BREWLET_FLEET_NODES,
// default 1000) running opted-in one-replica Deployments (BREWLET_FLEET_WORKLOADS, 500), the
// operator as its own process (rotation restarts, maxConcurrent 5), and a load generator in
// place of the node agents (fleet_loadgen_test.go): installs of 1-5 s, BREWLET_FLEET_FAILING
// nodes (3) refusing the new generation, BREWLET_FLEET_STALE agents (3) dying once they serve
// it. It prints how long the rotation and the restarts take against ceil(W/5) single
// rollouts and what the operator wrote (the API server's counters) per change reported. No
// timing is asserted; the test fails only when the rotation or the restarts never finish,
// since the figures would then mean nothing.
func TestBenchFleetRotation(t *testing.T) {
	cfg := fleetConfig{nodes: fleetEnv(t, "BREWLET_FLEET_NODES", 1000), workloads: fleetEnv(t, "BREWLET_FLEET_WORKLOADS", 500),
		failing: fleetEnv(t, "BREWLET_FLEET_FAILING", 3), stale: fleetEnv(t, "BREWLET_FLEET_STALE", 3),
		// Real agents renew every 3 s (a 15 s lease / 5); 10 s is the kubelet's node-lease
		// rate and spares a shared 2-core machine. BREWLET_FLEET_RENEW=3s is the real load.
		renew: fleetEnv(t, "BREWLET_FLEET_RENEW", 10*time.Second), minReady: fleetEnv(t, "BREWLET_FLEET_MIN_READY", 3*time.Second),
		stallGrace: fleetEnv(t, "BREWLET_FLEET_STALL_GRACE", time.Minute)}
	setLoggerOnce.Do(func() { ctrllog.SetLogger(logr.Discard()) })
	b := newFleetBench(t, cfg)
	b.setup()
	single := b.singleRollouts(3)
	b.quiet("before the rotation")
	before := b.snapshot()
	tl := b.rotate()
	b.quiet("after the restarts")
	b.report(single, before, b.snapshot(), tl)
}

type fleetBench struct {
	t      *testing.T
	cfg    fleetConfig
	cp     *framework.ControlPlane
	c      client.Client
	cache  cache.Cache
	agents *fleetAgents
	op     *runningOperator
	pid    int
	deps   *fleetWatch
}

func newFleetBench(t *testing.T, cfg fleetConfig) *fleetBench {
	start := time.Now()
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{ControllerManager: true, Scheduler: true, Kwok: true, KwokNodes: cfg.nodes})
	t.Logf("control plane with %d kwok nodes in %s", cfg.nodes, time.Since(start).Round(time.Second))
	b := &fleetBench{t: t, cfg: cfg, cp: cp, deps: &fleetWatch{patched: map[string]time.Time{}, rolled: map[string]time.Time{}}}
	ctx, cancel := context.WithCancel(context.Background())
	must(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetNS}}))
	// The binary's own leader-election timings: the tests' 4 s lease is lost (and the process
	// exits) when a loaded API server takes over 1.5 s to answer a renewal.
	b.op = startOperatorFlags(t, cp, []string{"--set", "operator.rotationRestarts.enabled=true"}, "--rotation-restarts",
		fmt.Sprintf("--rotation-restart-max-concurrent=%d", fleetMaxConcurrent), "--rotation-restart-progress-deadline=10m",
		"--leader-election-lease-duration=15s", "--leader-election-renew-deadline=10s", "--leader-election-retry-period=2s")
	b.pid = procOf(t, "--metrics-address="+b.op.metrics)
	// A thousand agents write through one client: the harness's QPS 200 would pace them.
	hc := rest.CopyConfig(cp.Config)
	hc.QPS, hc.Burst = 1000, 2000
	var err error
	b.c, err = client.New(hc, client.Options{Scheme: cp.Scheme})
	must(t, err)
	inNS := cache.ByObject{Namespaces: map[string]cache.Config{fleetNS: {}}}
	b.cache, err = cache.New(hc, cache.Options{Scheme: cp.Scheme, ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: inNS, &appsv1.Deployment{}: inNS}})
	must(t, err)
	must(t, b.cache.IndexField(ctx, &corev1.Pod{}, fleetPodNode, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }))
	go func() { _ = b.cache.Start(ctx) }()
	handlers := map[client.Object]func(any){&appsv1.Deployment{}: b.deps.observe, &brewletv1.RuntimeImage{}: b.deps.observeRI,
		&brewletv1.NodeRuntime{}: nil, &brewletv1.NodeProfile{}: nil, &corev1.Pod{}: nil, &corev1.Node{}: nil}
	for o, h := range handlers {
		inf, err := b.cache.GetInformer(ctx, o)
		must(t, err)
		if h != nil {
			_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, n any) { h(n) }})
			must(t, err)
		}
	}
	nodes := &corev1.NodeList{}
	must(t, b.c.List(ctx, nodes, client.MatchingLabels{"type": "kwok"}))
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	failing, stale := map[string]bool{}, map[string]bool{}
	n := len(nodes.Items)
	for i := 0; i < cfg.failing && n > 0; i++ {
		failing[nodes.Items[(i+1)*n/(cfg.failing+1)].Name] = true // spread over the waves (name order)
	}
	for i := 1; len(stale) < cfg.stale && i < n; i++ {
		if name := nodes.Items[i].Name; !failing[name] {
			stale[name] = true // the first wave: silent for most of the run
		}
	}
	b.agents = newFleetAgents(b.c, b.cache, fleetID, fleetNS, nodes.Items, failing, stale, cfg.renew)
	b.agents.start(ctx)
	t.Cleanup(func() { cancel(); b.agents.wg.Wait() })
	t.Logf("failing nodes %v, stale agents %v", slices.Sorted(maps.Keys(failing)), slices.Sorted(maps.Keys(stale)))
	return b
}

func fleetImage(gen int) string { return "127.0.0.1:5000/runtimes/python@" + digestN(gen) }

func (b *fleetBench) ri() *brewletv1.RuntimeImage {
	ri := &brewletv1.RuntimeImage{}
	must(b.t, b.cache.Get(context.Background(), client.ObjectKey{Name: fleetID}, ri))
	return ri
}

// setup: generation 1 on every node, then the workloads, running and reported.
func (b *fleetBench) setup() {
	t, ctx, start := b.t, context.Background(), time.Now()
	must(t, b.c.Create(ctx, runtimeImage(fleetID, fleetImage(1))))
	must(t, b.c.Create(ctx, &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Spec: brewletv1.NodeProfileSpec{
		NodePool: brewletv1.NodePool{Key: "type", Names: []string{"kwok"}}, RuntimeImages: []brewletv1.OfferedRuntime{{ID: fleetID}},
		ContainerdRestart: string(vocab.ContainerdRestartNone),
		Rollout:           &brewletv1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromString(fleetMaxUnavail)), MaxFailures: ptr.To[int32](fleetMaxFailures)}}}))
	eventually(t, 15*time.Minute, "generation 1 on every node", func() (bool, string) {
		ri := &brewletv1.RuntimeImage{}
		if err := b.cache.Get(ctx, client.ObjectKey{Name: fleetID}, ri); err != nil || ri.Status.Rotation == nil {
			return false, fmt.Sprint(err)
		}
		r := ri.Status.Rotation
		return ri.Status.Generation == 1 && int(r.Nodes.Current) == b.cfg.nodes && r.RotationCompletedAt != nil, fmt.Sprintf("%+v", r.Nodes)
	})
	t.Logf("generation 1 on %d nodes in %s", b.cfg.nodes, time.Since(start).Round(time.Second))
	start = time.Now()
	must(t, b.c.Create(ctx, fleetDeployment("probe", false, b.cfg.minReady)))
	for i := 0; i < b.cfg.workloads; i++ {
		must(t, b.c.Create(ctx, fleetDeployment(fmt.Sprintf("app-%04d", i), true, b.cfg.minReady)))
	}
	eventually(t, 15*time.Minute, "every pod running and reported", func() (bool, string) {
		running, _, _, _ := b.pods(0)
		tasks := b.agents.reportedTasks()
		return running == b.cfg.workloads && tasks == b.cfg.workloads, fmt.Sprintf("%d pods running, %d reported", running, tasks)
	})
	t.Logf("%d Deployments running and reported in %s", b.cfg.workloads, time.Since(start).Round(time.Second))
}

// fleetDeployment is one replica of an app on the runtime. The probe neither opts in nor
// runs the runtime: the operator and the agents leave it alone.
func fleetDeployment(name string, optIn bool, minReady time.Duration) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fleetNS},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			MinReadySeconds: int32(minReady / time.Second),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app@" + goodDigest}},
					Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}}}}}}
	if optIn {
		d.Annotations = map[string]string{vocab.AnnotationRestartOnRotation: "true"}
		d.Spec.Template.Annotations[vocab.AnnotationRuntimeImage] = fleetID
	}
	return d
}

// fleetRolledOut is the operator's own test for a finished Deployment rollout.
func fleetRolledOut(d *appsv1.Deployment) bool {
	want, s := ptr.Deref(d.Spec.Replicas, 1), d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want
}

// singleRollouts times a pod-template change of the probe (the barrier patch is one) to
// its finished rollout: the unit of the ideal restart schedule.
func (b *fleetBench) singleRollouts(n int) []time.Duration {
	ctx := context.Background()
	var out []time.Duration
	for i := 0; i < n; i++ {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "probe"}}
		body := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"bench.brewlet.sh/rev":"%d"}}}}}`, i)
		start := time.Now()
		must(b.t, b.c.Patch(ctx, d, client.RawPatch("application/merge-patch+json", []byte(body))))
		eventually(b.t, 5*time.Minute, "probe rollout", func() (bool, string) {
			got := &appsv1.Deployment{}
			must(b.t, b.c.Get(ctx, client.ObjectKeyFromObject(d), got))
			return got.Generation >= d.Generation && fleetRolledOut(got), fmt.Sprintf("%+v", got.Status)
		})
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

// quiet waits until the operator is done with a phase: every NodeRuntime spec allows the
// generation its node serves, and the RuntimeImage and NodeProfile kept their
// resourceVersion for 5 s. A snapshot then holds what one phase cost.
func (b *fleetBench) quiet(when string) {
	ctx, last, since, start := context.Background(), "", time.Now(), time.Now()
	for {
		np, nrts := &brewletv1.NodeProfile{}, &brewletv1.NodeRuntimeList{}
		must(b.t, b.cache.Get(ctx, client.ObjectKey{Name: "fleet"}, np))
		must(b.t, b.cache.List(ctx, nrts, client.UnsafeDisableDeepCopy))
		allowed, behind := map[int64]int{}, 0
		for _, n := range nrts.Items {
			for _, d := range n.Spec.Runtimes {
				allowed[d.AllowedGeneration]++
				for _, e := range n.Status.Runtimes {
					if e.ID == d.ID && e.State == string(vocab.StateReady) && d.AllowedGeneration != e.Generation {
						behind++
					}
				}
			}
		}
		b.alive()
		if v := b.ri().ResourceVersion + "/" + np.ResourceVersion; v != last {
			last, since = v, time.Now()
		}
		if done := behind == 0 && time.Since(since) > 5*time.Second; done || time.Since(start) > 3*time.Minute {
			b.t.Logf("operator quiet %s: %t after %s; nodes by allowedGeneration %v, %d not allowed the generation they serve",
				when, done, time.Since(start).Round(time.Second), allowed, behind)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// pods counts the runtime's running pods; against generation gen, those still on an older
// one and those on excluded (failing) nodes, which serve the older one by design; and those
// not Ready (kube-controller-manager marks a NotReady node's pods so, and kwok's stages never
// make a Running pod Ready again).
func (b *fleetBench) pods(gen int64) (running, old, onExcluded, unready int) {
	pods := &corev1.PodList{}
	must(b.t, b.cache.List(context.Background(), pods, client.InNamespace(fleetNS), client.UnsafeDisableDeepCopy))
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[vocab.AnnotationRuntimeImage] != fleetID || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		running++
		if !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue }) {
			unready++
		}
		n := b.agents.byName[p.Spec.NodeName]
		switch g, known := b.agents.podGeneration(p); {
		case n != nil && n.fail:
			onExcluded++
		case !known || g < gen:
			old++
		}
	}
	return running, old, onExcluded, unready
}

// notReadyNodes counts the kwok nodes whose Ready condition is not True.
func (b *fleetBench) notReadyNodes() int {
	nodes, n := &corev1.NodeList{}, 0
	must(b.t, b.cache.List(context.Background(), nodes, client.UnsafeDisableDeepCopy))
	for _, nd := range nodes.Items {
		if !slices.ContainsFunc(nd.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}) {
			n++
		}
	}
	return n
}

// fleetWatch records, from informer events, when the target generation and RotationComplete
// were first seen, and when each opted-in Deployment got the barrier and finished rolling out.
type fleetWatch struct {
	mu                    sync.Mutex
	target                int64
	gen, complete         time.Time
	patched, rolled       map[string]time.Time
	inFlight, maxInFlight int
}

func (d *fleetWatch) observeRI(obj any) {
	ri, ok := obj.(*brewletv1.RuntimeImage)
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !ok || d.target == 0 || ri.Status.Generation < d.target {
		return
	}
	if d.gen.IsZero() {
		d.gen = now
	}
	if r := ri.Status.Rotation; d.complete.IsZero() && r != nil && r.Target.Generation == d.target && r.RotationCompletedAt != nil {
		d.complete = now
	}
}

func (d *fleetWatch) observe(obj any) {
	dep, ok := obj.(*appsv1.Deployment)
	if !ok || dep.Annotations[vocab.AnnotationRestartOnRotation] != "true" {
		return
	}
	br, ok := restarts.ParseBarrier(dep.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration])
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.target == 0 || !ok || br.Generation < d.target {
		return
	}
	if _, seen := d.patched[dep.Name]; !seen {
		d.patched[dep.Name] = now
		d.inFlight++
		d.maxInFlight = max(d.maxInFlight, d.inFlight)
	}
	if _, done := d.rolled[dep.Name]; !done && fleetRolledOut(dep) {
		d.rolled[dep.Name] = now
		d.inFlight--
	}
}

type fleetTimeline struct {
	start, gen, nodes, complete, done      time.Time
	maxSize, endSize, maxRecordsInProgress int
	maxNotReady, maxUnready                int
	maxRSS                                 int64
	outcomes                               map[string]int
}

// rotate changes the digest and follows the rotation until the operator restarted every
// workload that needed it and every pod runs the new generation.
func (b *fleetBench) rotate() fleetTimeline {
	t := b.t
	b.deps.mu.Lock()
	b.deps.target = 2
	b.deps.mu.Unlock()
	b.agents.maxInstalling.Store(b.agents.installing.Load())
	b.agents.unstaged.Store(0)
	tl := fleetTimeline{start: time.Now()}
	updateRI(t, b.c, fleetID, func(ri *brewletv1.RuntimeImage) { ri.Spec.Source.Image = fleetImage(2) })
	deadline := tl.start.Add(20 * time.Minute)
	for {
		b.alive()
		now, ri := time.Now(), b.ri()
		raw, err := json.Marshal(ri)
		must(t, err)
		tl.maxSize, tl.endSize = max(tl.maxSize, len(raw)), len(raw)
		tl.maxRSS = max(tl.maxRSS, procKiB(b.pid, "VmRSS"))
		_, _, _, unready := b.pods(2)
		tl.maxNotReady, tl.maxUnready = max(tl.maxNotReady, b.notReadyNodes()), max(tl.maxUnready, unready)
		b.deps.mu.Lock()
		complete := b.deps.complete
		tl.gen = b.deps.gen
		b.deps.mu.Unlock()
		c := b.agents.counts(2)
		if tl.nodes.IsZero() && c.healthyOn == c.healthy {
			tl.nodes = c.last
		}
		st := ri.Status
		if p := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionRotationProgressing)); p != nil && p.Reason == string(vocab.ReasonRotationHalted) {
			t.Fatalf("the rotation halted: %s", p.Message)
		}
		if tl.complete.IsZero() && !complete.IsZero() {
			tl.complete, deadline = complete, now.Add(20*time.Minute)
			t.Logf("RotationComplete after %s: %s", complete.Sub(tl.start).Round(time.Second), fleetConditions(ri))
		}
		if tl.complete.IsZero() && !tl.nodes.IsZero() && c.failed == c.failing && now.Sub(tl.nodes) > b.cfg.stallGrace {
			// Every healthy node serves generation 2 and the failing ones failed it within the
			// budget: the rotation is complete without them (they are excluded).
			t.Fatalf("RotationComplete still not set %s after every healthy node served generation 2 (%d excluded node(s) within rollout.maxFailures=%d): %s",
				now.Sub(tl.nodes).Round(time.Second), c.failed, fleetMaxFailures, fleetConditions(ri))
		}
		outcomes := map[string]int{}
		if st.Rotation != nil && st.Rotation.RestartCounts != nil {
			rc := st.Rotation.RestartCounts
			outcomes = map[string]int{restarts.OutcomePending: int(rc.Pending), restarts.OutcomeInProgress: int(rc.InProgress),
				restarts.OutcomeSucceeded: int(rc.Succeeded), restarts.OutcomeFailed: int(rc.Failed), restarts.OutcomeDeferred: int(rc.Deferred),
				restarts.OutcomeNotApplicable: int(rc.NotApplicable)}
		}
		inProgress, pending := outcomes[restarts.OutcomeInProgress], outcomes[restarts.OutcomePending]
		tl.maxRecordsInProgress = max(tl.maxRecordsInProgress, inProgress)
		if !tl.complete.IsZero() {
			_, old, _, _ := b.pods(2)
			b.deps.mu.Lock()
			inFlight := b.deps.inFlight
			b.deps.mu.Unlock()
			if old == 0 && inFlight == 0 && inProgress == 0 && pending == 0 {
				tl.done, tl.outcomes = now, outcomes
				return tl
			}
		}
		if now.After(deadline) {
			running, old, excl, unready := b.pods(2)
			what := "the rotation did not complete on the nodes"
			if !tl.complete.IsZero() {
				what = "the restarts did not finish"
			}
			t.Fatalf("%s within 20 minutes: %d of %d healthy nodes on generation 2, %d of %d failing nodes failed it; %d kwok nodes NotReady now (%d at most); "+
				"%d pods running, %d of them not Ready (%d at most), %d on an older generation, %d on excluded nodes; %d restarts in progress, %d pending; %s\noperator log:\n%s",
				what, c.healthyOn, c.healthy, c.failed, c.failing, b.notReadyNodes(), tl.maxNotReady, running, unready, tl.maxUnready, old, excl, inProgress, pending,
				fleetConditions(ri), b.operatorLog())
		}
		time.Sleep(time.Second)
	}
}

func fleetConditions(ri *brewletv1.RuntimeImage) string {
	var out []string
	for _, c := range ri.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s/%s (%s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, "; ")
}

// alive ends the test when the operator process is gone: nothing after would mean anything.
func (b *fleetBench) alive() {
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", b.pid)); err != nil {
		b.t.Fatalf("brewlet-operator (pid %d) exited; its log ends:\n%s", b.pid, b.operatorLog())
	}
}

func (b *fleetBench) operatorLog() string {
	out, err := os.ReadFile(filepath.Join(b.cp.Dir, "logs", "brewlet-operator.log"))
	if err != nil {
		return err.Error()
	}
	return string(out[max(0, len(out)-8192):])
}

// report prints the table (lines starting with "|", which `make bench` keeps).
func (b *fleetBench) report(single []time.Duration, before, after fleetSnap, tl fleetTimeline) {
	t := b.t
	api := func(res, sub string, kv ...string) float64 {
		return after.api.total(res, sub, kv...) - before.api.total(res, sub, kv...)
	}
	op := func(kv ...string) float64 { return after.op.total("", "", kv...) - before.op.total("", "", kv...) }
	// The operator never deletes NodeRuntimes: the test and the garbage collector do.
	riStatus, nrtSpec, npStatus := api("runtimeimages", "status"), api("noderuntimes", "")-api("noderuntimes", "", "verb", "DELETE"), api("nodeprofiles", "status")
	depPatch := api("deployments", "", "verb", "PATCH")
	conflicts := api("runtimeimages", "status", "code", "409") + api("noderuntimes", "", "code", "409") + api("nodeprofiles", "status", "code", "409")
	evs := &eventsv1.EventList{}
	must(t, b.c.List(context.Background(), evs))
	opEvents := 0
	for _, e := range evs.Items {
		if e.ReportingController == "brewlet-operator" && !e.CreationTimestamp.Before(&metav1.Time{Time: tl.start.Truncate(time.Second)}) {
			opEvents++
		}
	}
	b.deps.mu.Lock()
	patched, rolled := slices.SortedFunc(maps.Values(b.deps.patched), time.Time.Compare), slices.SortedFunc(maps.Values(b.deps.rolled), time.Time.Compare)
	var rollouts []time.Duration
	for n, p := range b.deps.patched {
		if r, ok := b.deps.rolled[n]; ok {
			rollouts = append(rollouts, r.Sub(p))
		}
	}
	maxInFlight := b.deps.maxInFlight
	b.deps.mu.Unlock()
	// With 5 slots, patch i waits for rollout i-5 to finish: the gap is the operator's turn.
	var handoffs []time.Duration
	for i := fleetMaxConcurrent; i < len(patched) && i-fleetMaxConcurrent < len(rolled); i++ {
		handoffs = append(handoffs, patched[i].Sub(rolled[i-fleetMaxConcurrent]))
	}
	slices.Sort(rollouts)
	slices.Sort(handoffs)
	restarted, first, last := len(rolled), tl.complete, tl.complete
	if len(rolled) > 0 {
		first, last = patched[0], rolled[len(rolled)-1]
	}
	since := func(at time.Time) string { return at.Sub(tl.start).Round(100 * time.Millisecond).String() }
	excludedNote := fmt.Sprintf("%d failing node(s) excluded; %d Deployment(s) deferred (their pod is on one)", b.cfg.failing, tl.outcomes[restarts.OutcomeDeferred])
	slots := math.Ceil(float64(restarted) / fleetMaxConcurrent)
	one, phase := single[len(single)/2], last.Sub(tl.complete)
	ideal := time.Duration(slots) * one
	agentWrites := float64(after.status - before.status)
	opWrites := riStatus + nrtSpec + npStatus + depPatch + float64(opEvents)
	reconciles := map[string]float64{}
	for _, c := range []string{"runtimeimage", "nodeprofile", "rotationrestarts"} {
		reconciles[c] = op("controller", c, "metric", "controller_runtime_reconcile_total")
	}
	passTime := func(c string) string {
		sum, n := op("controller", c, "metric", "controller_runtime_reconcile_time_seconds_sum"), op("controller", c, "metric", "controller_runtime_reconcile_time_seconds_count")
		return time.Duration(sum / n * float64(time.Second)).Round(time.Millisecond).String()
	}
	pct := func(d []time.Duration, p int) string {
		if len(d) == 0 {
			return "—"
		}
		return d[min(len(d)-1, len(d)*p/100)].Round(10 * time.Millisecond).String()
	}
	var s strings.Builder
	fmt.Fprintf(&s, "\n| fleet rotation: %d kwok nodes (%d failing, %d stale agents), %d opted-in Deployments; maxUnavailable %s, maxFailures %d, maxConcurrent %d; minReadySeconds %s; Lease renewal %s | value | note |\n|---|---|---|\n",
		b.cfg.nodes, b.cfg.failing, b.cfg.stale, b.cfg.workloads, fleetMaxUnavail, fleetMaxFailures, fleetMaxConcurrent, b.cfg.minReady, b.cfg.renew)
	row := func(k, note, format string, v ...any) {
		fmt.Fprintf(&s, "| %s | %s | %s |\n", k, fmt.Sprintf(format, v...), note)
	}
	row("generation 2 assigned", "from the digest edit (all times below too)", "%s", since(tl.gen))
	row("every healthy node serves generation 2", fmt.Sprintf("%d nodes, installs of 1–5 s", b.cfg.nodes-b.cfg.failing), "%s", since(tl.nodes))
	row("nodes installing at once (max)", fmt.Sprintf("maxUnavailable %s of %d", fleetMaxUnavail, b.cfg.nodes), "%d", b.agents.maxInstalling.Load())
	row("installs on allowedGeneration 0", "0 reads as \"current\": outside any wave (must be 0)", "%d", b.agents.unstaged.Load())
	row("RotationComplete", excludedNote, "%s", since(tl.complete))
	row("first barrier patch", "after RotationComplete", "%s", first.Sub(tl.complete).Round(100*time.Millisecond))
	row("every opted-in Deployment restarted and rolled out", fmt.Sprintf("%d restarted; restart phase %s; every pod on generation 2 at %s", restarted, phase.Round(time.Second), since(tl.done)),
		"%s", since(last))
	row("kwok nodes NotReady / running pods not Ready (max)", "the machine's load: kwok misses heartbeats, never re-readies pods", "%d / %d", tl.maxNotReady, tl.maxUnready)
	row("restarts in progress at once (max)", fmt.Sprintf("on the Deployments; %d in status records", tl.maxRecordsInProgress), "%d", maxInFlight)
	row("one rollout alone (median of 3)", fmt.Sprintf("probe, template change: %v", single), "%s", one.Round(10*time.Millisecond))
	row("a restart's rollout in the run (median / p90)", "barrier seen to rolled out", "%s / %s", pct(rollouts, 50), pct(rollouts, 90))
	row("slot handoff (median / p90)", "a rollout done to the next barrier patch", "%s / %s", pct(handoffs, 50), pct(handoffs, 90))
	row("ideal: ceil(restarted/5) × one rollout", fmt.Sprintf("%.0f slots", slots), "%s", ideal.Round(time.Second))
	row("restart phase / ideal", "issue 11 asks ≤ 1.2×", "%.2f×", phase.Seconds()/ideal.Seconds())
	if len(rollouts) > 0 {
		row("restart phase / (ceil(W/5) × median rollout in the run)", "the same, rollouts slowed by the load left out", "%.2f×", phase.Seconds()/(slots*rollouts[len(rollouts)/2].Seconds()))
	}
	row("operator writes: RuntimeImage status", "RuntimeImage and restart controllers", "%.0f", riStatus)
	row("operator writes: NodeRuntime spec", fmt.Sprintf("%d nodes", b.cfg.nodes), "%.0f", nrtSpec)
	row("operator writes: NodeProfile status", "", "%.0f", npStatus)
	row("operator writes: Deployment patches", "only the operator patches Deployments", "%.0f", depPatch)
	row("operator writes: Events", "events.k8s.io objects it reported", "%d", opEvents)
	row("operator write conflicts (409)", "included above", "%.0f", conflicts)
	row("changes: agent status writes + restarted workloads", "what the operator reacts to", "%.0f + %d", agentWrites, restarted)
	row("operator writes per change", fmt.Sprintf("%.0f writes; O(nodes × passes) would be %d × %.0f", opWrites, b.cfg.nodes, reconciles["runtimeimage"]+reconciles["nodeprofile"]+reconciles["rotationrestarts"]),
		"%.2f", opWrites/(agentWrites+float64(restarted)))
	row("operator passes: runtimeimage / nodeprofile / rotationrestarts", fmt.Sprintf("mean pass %s / %s / %s", passTime("runtimeimage"), passTime("nodeprofile"), passTime("rotationrestarts")),
		"%.0f / %.0f / %.0f", reconciles["runtimeimage"], reconciles["nodeprofile"], reconciles["rotationrestarts"])
	row("operator memory: VmHWM / max VmRSS in the rotation", "", "%d / %d MiB", procKiB(b.pid, "VmHWM")/1024, tl.maxRSS/1024)
	row("operator CPU", fmt.Sprintf("over %s", after.at.Sub(before.at).Round(time.Second)), "%s", (after.cpu - before.cpu).Round(100*time.Millisecond))
	row("RuntimeImage JSON: end / max", fmt.Sprintf("restart counts in status: %v", tl.outcomes), "%d / %d bytes", tl.endSize, tl.maxSize)
	row("load generator writes: Lease / status", fmt.Sprintf("%d errors", b.agents.errs.Load()), "%d / %d", after.leases-before.leases, after.status-before.status)
	t.Log(s.String())
	fmt.Print(s.String())
	t.Logf("API server writes during the rotation, every client (verb group/resource/subresource code):\n%s", after.api.writes(before.api))
	if v := b.agents.lastErr.Load(); v != nil {
		t.Logf("load generator: %d errors, last: %v", b.agents.errs.Load(), v)
	}
}
