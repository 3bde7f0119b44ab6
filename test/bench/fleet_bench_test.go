//go:build bench

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
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
	"brewlet.sh/brewlet/test/kit"
)

const (
	fleetNS, fleetID   = "fleet", "python"
	fleetMaxConcurrent = 5
	fleetMaxFailures   = 5     // the 3 failing nodes must not halt the rotation
	fleetMaxUnavail    = "10%" // a wave of a tenth of the pool, as a cautious production profile
	// The operator's defaults, passed explicitly because the figures are reasoned from them:
	// the second failed restart of a target halts its restarts, and a killed agent's node
	// is stuck (AgentNotReporting) a minute after its last Lease renewal.
	fleetRestartMaxFailures = 1
	fleetStaleAfter         = time.Minute
)

type fleetConfig struct {
	nodes, workloads, failing, stale      int
	renew, minReady, stallGrace, deadline time.Duration // stallGrace: how long RotationComplete may lag the last healthy node
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
	kit.Must(t, err)
	return T(d)
}

// TestBenchFleetRotation rotates one RuntimeImage across a kwok fleet (BREWLET_FLEET_NODES,
// default 1000) running opted-in one-replica Deployments (BREWLET_FLEET_WORKLOADS, 500), the
// operator as its own process (rotation restarts, maxConcurrent 5), and a load generator in
// place of the node agents (fleet_loadgen_test.go): installs of 1-5 s, BREWLET_FLEET_FAILING
// nodes (3) refusing the new generation, BREWLET_FLEET_STALE agents (2 % of the nodes) killed
// as their wave lets them install it. It prints how long the rotation and the restarts take
// against ceil(W/5) single rollouts and what the operator wrote (the API server's counters)
// per change reported. Then a bad digest (fleet_baddigest_test.go): a third generation whose
// restarted workloads never come up, followed untouched until the operator halts its
// restarts. No timing is asserted; the test fails only when the rotation, the restarts or
// the halt never come, since the figures would then mean nothing.
func TestBenchFleetRotation(t *testing.T) {
	nodes := fleetEnv(t, "BREWLET_FLEET_NODES", 1000)
	cfg := fleetConfig{nodes: nodes, workloads: fleetEnv(t, "BREWLET_FLEET_WORKLOADS", 500),
		failing: fleetEnv(t, "BREWLET_FLEET_FAILING", 3), stale: fleetEnv(t, "BREWLET_FLEET_STALE", (nodes*2+99)/100),
		// Real agents renew every 3 s (a 15 s lease / 5); 10 s is the kubelet's node-lease
		// rate and spares a shared 2-core machine. BREWLET_FLEET_RENEW=3s is the real load.
		renew: fleetEnv(t, "BREWLET_FLEET_RENEW", 10*time.Second), minReady: fleetEnv(t, "BREWLET_FLEET_MIN_READY", 3*time.Second),
		stallGrace: fleetEnv(t, "BREWLET_FLEET_STALL_GRACE", time.Minute),
		// Healthy one-replica rollouts take about 3 s: 2 m is far beyond a loaded machine's
		// slowest, and keeps the bad digest's wait for its failures short (the default 10 m
		// would make that phase 10 minutes of waiting).
		deadline: fleetEnv(t, "BREWLET_FLEET_PROGRESS_DEADLINE", 2*time.Minute)}
	kit.SetLoggerOnce.Do(func() { ctrllog.SetLogger(logr.Discard()) })
	b := newFleetBench(t, cfg)
	b.setup()
	single := b.singleRollouts(3)
	b.quiet("before the rotation")
	before := b.snapshot()
	tl := b.rotate()
	b.quiet("after the restarts")
	b.report(single, before, b.snapshot(), tl)
	b.badDigest()
}

type fleetBench struct {
	t      *testing.T
	cfg    fleetConfig
	cp     *framework.ControlPlane
	c      client.Client
	cache  cache.Cache
	agents *fleetAgents
	op     *kit.RunningOperator
	pid    int
	deps   *fleetWatch
}

func newFleetBench(t *testing.T, cfg fleetConfig) *fleetBench {
	start := time.Now()
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{ControllerManager: true, Scheduler: true, Kwok: true, KwokNodes: cfg.nodes})
	t.Logf("control plane with %d kwok nodes in %s", cfg.nodes, time.Since(start).Round(time.Second))
	b := &fleetBench{t: t, cfg: cfg, cp: cp, deps: &fleetWatch{patched: map[string]time.Time{}, rolled: map[string]time.Time{}}}
	ctx, cancel := context.WithCancel(context.Background())
	kit.Must(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetNS}}))
	// The binary's own leader-election timings: the tests' 4 s lease is lost (and the process
	// exits) when a loaded API server takes over 1.5 s to answer a renewal.
	b.op = kit.StartOperatorFlags(t, cp, []string{"--set", "operator.rotationRestarts.enabled=true"}, "--rotation-restarts",
		fmt.Sprintf("--rotation-restart-max-concurrent=%d", fleetMaxConcurrent), fmt.Sprintf("--rotation-restart-progress-deadline=%s", cfg.deadline),
		fmt.Sprintf("--rotation-restart-max-failures=%d", fleetRestartMaxFailures), fmt.Sprintf("--node-stale-after=%s", fleetStaleAfter),
		"--leader-election-lease-duration=15s", "--leader-election-renew-deadline=10s", "--leader-election-retry-period=2s")
	b.pid = procOf(t, "--metrics-address="+b.op.Metrics)
	// A thousand agents write through one client: the harness's QPS 200 would pace them.
	hc := rest.CopyConfig(cp.Config)
	hc.QPS, hc.Burst = 1000, 2000
	var err error
	b.c, err = client.New(hc, client.Options{Scheme: cp.Scheme})
	kit.Must(t, err)
	inNS := cache.ByObject{Namespaces: map[string]cache.Config{fleetNS: {}}}
	b.cache, err = cache.New(hc, cache.Options{Scheme: cp.Scheme, ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: inNS, &appsv1.Deployment{}: inNS}})
	kit.Must(t, err)
	kit.Must(t, b.cache.IndexField(ctx, &corev1.Pod{}, fleetPodNode, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }))
	go func() { _ = b.cache.Start(ctx) }()
	handlers := map[client.Object]func(any){&appsv1.Deployment{}: b.deps.observe, &brewletv1.RuntimeImage{}: b.deps.observeRI,
		&brewletv1.NodeRuntime{}: nil, &brewletv1.NodeProfile{}: nil, &corev1.Pod{}: nil, &corev1.Node{}: nil}
	for o, h := range handlers {
		inf, err := b.cache.GetInformer(ctx, o)
		kit.Must(t, err)
		if h != nil {
			_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, n any) { h(n) }})
			kit.Must(t, err)
		}
	}
	nodes := &corev1.NodeList{}
	kit.Must(t, b.c.List(ctx, nodes, client.MatchingLabels{"type": "kwok"}))
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	failing, stale := map[string]bool{}, map[string]bool{}
	n := len(nodes.Items)
	for i := 0; i < cfg.failing && n > 0; i++ {
		failing[nodes.Items[(i+1)*n/(cfg.failing+1)].Name] = true // spread over the waves (name order)
	}
	for i := 0; i < cfg.stale && n > 0; i++ {
		// Spread over the waves too, so agents die all through the rotation.
		for j := (2*i + 1) * n / (2 * cfg.stale); j < n; j++ {
			if name := nodes.Items[j].Name; !failing[name] && !stale[name] {
				stale[name] = true
				break
			}
		}
	}
	b.agents = newFleetAgents(b.c, b.cache, fleetID, fleetNS, nodes.Items, failing, stale, cfg.renew)
	b.agents.start(ctx)
	t.Cleanup(func() { cancel(); b.agents.wg.Wait() })
	t.Logf("failing nodes %v, agents killed mid-rotation %v", slices.Sorted(maps.Keys(failing)), slices.Sorted(maps.Keys(stale)))
	return b
}

func fleetImage(gen int) string { return "127.0.0.1:5000/runtimes/python@" + kit.DigestN(gen) }

func (b *fleetBench) ri() *brewletv1.RuntimeImage {
	ri := &brewletv1.RuntimeImage{}
	kit.Must(b.t, b.cache.Get(context.Background(), client.ObjectKey{Name: fleetID}, ri))
	return ri
}

// setup: generation 1 on every node, then the workloads, running and reported.
func (b *fleetBench) setup() {
	t, ctx, start := b.t, context.Background(), time.Now()
	kit.Must(t, b.c.Create(ctx, kit.RuntimeImage(fleetID, fleetImage(1))))
	kit.Must(t, b.c.Create(ctx, &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Spec: brewletv1.NodeProfileSpec{
		NodePool: brewletv1.NodePool{Key: vocab.NodeRestrictionPrefix + "pool", Names: []string{"kwok"}}, RuntimeImages: []brewletv1.OfferedRuntime{{ID: fleetID}},
		ContainerdRestart: string(vocab.ContainerdRestartNone),
		Rollout:           &brewletv1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromString(fleetMaxUnavail)), MaxFailures: ptr.To[int32](fleetMaxFailures)}}}))
	kit.Eventually(t, 15*time.Minute, "generation 1 on every node", func() (bool, string) {
		ri := &brewletv1.RuntimeImage{}
		if err := b.cache.Get(ctx, client.ObjectKey{Name: fleetID}, ri); err != nil || ri.Status.Rotation == nil {
			return false, fmt.Sprint(err)
		}
		r := ri.Status.Rotation
		return ri.Status.Generation == 1 && int(r.Nodes.Current) == b.cfg.nodes && r.RotationCompletedAt != nil, fmt.Sprintf("%+v", r.Nodes)
	})
	t.Logf("generation 1 on %d nodes in %s", b.cfg.nodes, time.Since(start).Round(time.Second))
	start = time.Now()
	kit.Must(t, b.c.Create(ctx, fleetDeployment("probe", false, b.cfg.minReady)))
	for i := 0; i < b.cfg.workloads; i++ {
		kit.Must(t, b.c.Create(ctx, fleetDeployment(fmt.Sprintf("app-%04d", i), true, b.cfg.minReady)))
	}
	kit.Eventually(t, 15*time.Minute, "every pod running and reported", func() (bool, string) {
		running, _, _, _ := b.pods(0)
		tasks := b.agents.reportedTasks(false)
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
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app@" + kit.GoodDigest}},
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
		kit.Must(b.t, b.c.Patch(ctx, d, client.RawPatch("application/merge-patch+json", []byte(body))))
		kit.Eventually(b.t, 5*time.Minute, "probe rollout", func() (bool, string) {
			got := &appsv1.Deployment{}
			kit.Must(b.t, b.c.Get(ctx, client.ObjectKeyFromObject(d), got))
			return got.Generation >= d.Generation && fleetRolledOut(got), fmt.Sprintf("%+v", got.Status)
		})
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

// quiet waits until the operator is done with a phase: every NodeRuntime spec allows the
// generation its node serves (but on nodes the rotation went on without), and the
// RuntimeImage and NodeProfile kept their resourceVersion for 5 s. A snapshot then holds
// what one phase cost.
func (b *fleetBench) quiet(when string) {
	ctx, last, since, start := context.Background(), "", time.Now(), time.Now()
	for {
		np, nrts := &brewletv1.NodeProfile{}, &brewletv1.NodeRuntimeList{}
		kit.Must(b.t, b.cache.Get(ctx, client.ObjectKey{Name: "fleet"}, np))
		kit.Must(b.t, b.cache.List(ctx, nrts, client.UnsafeDisableDeepCopy))
		allowed, behind := map[int64]int{}, 0
		for _, n := range nrts.Items {
			for _, d := range n.Spec.Runtimes {
				allowed[d.AllowedGeneration]++
				for _, e := range n.Status.Runtimes {
					// A node left out keeps its allowance and never serves it: waiting
					// for it would only spend the 3 minutes below.
					if e.ID == d.ID && e.State == string(vocab.StateReady) && d.AllowedGeneration != e.Generation && !b.agents.left(n.Name) {
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
// one and those on excluded nodes (failing, or whose agent was killed), which serve the
// older one by design, restarted pods landing there too (kwok keeps the node Ready); and those
// not Ready (kube-controller-manager marks a NotReady node's pods so, and kwok's stages never
// make a Running pod Ready again).
func (b *fleetBench) pods(gen int64) (running, old, onExcluded, unready int) {
	pods := &corev1.PodList{}
	kit.Must(b.t, b.cache.List(context.Background(), pods, client.InNamespace(fleetNS), client.UnsafeDisableDeepCopy))
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[vocab.AnnotationRuntimeImage] != fleetID || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		running++
		if !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue }) {
			unready++
		}
		switch g, known := b.agents.podGeneration(p); {
		case b.agents.left(p.Spec.NodeName):
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
	kit.Must(b.t, b.cache.List(context.Background(), nodes, client.UnsafeDisableDeepCopy))
	for _, nd := range nodes.Items {
		if !slices.ContainsFunc(nd.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}) {
			n++
		}
	}
	return n
}

// fleetWatch records, from informer events, when the target generation, RotationComplete
// and a restart halt were first seen, and when each opted-in Deployment got the barrier and
// finished rolling out.
type fleetWatch struct {
	mu                    sync.Mutex
	target                int64
	gen, complete, halted time.Time
	patched, rolled       map[string]time.Time
	inFlight, maxInFlight int
	excluded              brewletv1.RotationNodeCounts // the node counts RotationComplete came with
}

// retarget follows generation gen from now on: each phase's figures start from nothing.
func (d *fleetWatch) retarget(gen int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.target, d.gen, d.complete, d.halted, d.excluded = gen, time.Time{}, time.Time{}, time.Time{}, brewletv1.RotationNodeCounts{}
	d.patched, d.rolled, d.inFlight, d.maxInFlight = map[string]time.Time{}, map[string]time.Time{}, 0, 0
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
	if d.halted.IsZero() && ri.Status.RollbackInEffect() != nil {
		d.halted = now // the halt's own status version was not seen: the rollback follows it
	}
	r := ri.Status.Rotation
	if r == nil || r.Target.Generation != d.target {
		return
	}
	if d.complete.IsZero() && r.RotationCompletedAt != nil {
		d.complete, d.excluded = now, r.Nodes
	}
	if d.halted.IsZero() && r.RestartsHalted != nil {
		d.halted = now
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
	start, gen, nodes, lastKill, complete, done time.Time
	maxSize, endSize, maxRecordsInProgress      int
	maxNotReady, maxUnready, onStale            int
	maxRSS                                      int64
	outcomes                                    map[string]int
	excluded                                    brewletv1.RotationNodeCounts // at RotationComplete
}

// rotate changes the digest and follows the rotation until the operator restarted every
// workload that needed it and every pod runs the new generation.
func (b *fleetBench) rotate() fleetTimeline {
	t := b.t
	b.deps.retarget(2)
	b.agents.maxInstalling.Store(b.agents.installing.Load())
	b.agents.unstaged.Store(0)
	tl := fleetTimeline{start: time.Now(), onStale: b.agents.reportedTasks(true)}
	kit.UpdateRI(t, b.c, fleetID, func(ri *brewletv1.RuntimeImage) { ri.Spec.Source.Image = fleetImage(2) })
	deadline := tl.start.Add(20 * time.Minute)
	for {
		b.alive()
		now, ri := time.Now(), b.ri()
		raw, err := json.Marshal(ri)
		kit.Must(t, err)
		tl.maxSize, tl.endSize = max(tl.maxSize, len(raw)), len(raw)
		tl.maxRSS = max(tl.maxRSS, procKiB(b.pid, "VmRSS"))
		_, _, _, unready := b.pods(2)
		tl.maxNotReady, tl.maxUnready = max(tl.maxNotReady, b.notReadyNodes()), max(tl.maxUnready, unready)
		b.deps.mu.Lock()
		complete, halted := b.deps.complete, b.deps.halted
		tl.gen, tl.excluded = b.deps.gen, b.deps.excluded
		b.deps.mu.Unlock()
		c := b.agents.counts(2)
		if tl.nodes.IsZero() && c.healthyOn == c.healthy {
			tl.nodes = c.last
		}
		tl.lastKill = c.lastKill
		st := ri.Status
		if p := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionRotationProgressing)); p != nil && p.Reason == string(vocab.ReasonRotationHalted) {
			t.Fatalf("the rotation halted: %s", p.Message)
		}
		if !halted.IsZero() {
			t.Fatalf("restarts onto generation 2 halted: healthy rollouts missed --rotation-restart-progress-deadline=%s, the machine is too loaded for the figures to mean anything: %s",
				b.cfg.deadline, fleetConditions(ri))
		}
		if tl.complete.IsZero() && !complete.IsZero() {
			tl.complete, deadline = complete, now.Add(20*time.Minute)
			t.Logf("RotationComplete after %s: %s", complete.Sub(tl.start).Round(time.Second), fleetConditions(ri))
		}
		// A killed agent's node is silent a stale period after its last renewal, and both
		// controllers look again every stale period while the rotation is unfinished.
		settled := maxTime(tl.nodes, c.lastKill.Add(2*fleetStaleAfter))
		if tl.complete.IsZero() && !tl.nodes.IsZero() && c.failed == c.failing && c.killed == c.stale && now.Sub(settled) > b.cfg.stallGrace {
			// Every healthy node serves generation 2, the failing ones failed it within the
			// budget and the stuck ones are silent: the rotation is complete without them.
			t.Fatalf("RotationComplete still not set %s after every healthy node served generation 2 and every killed agent's node could be found silent (%d failed within rollout.maxFailures=%d, %d agents killed): %s",
				now.Sub(settled).Round(time.Second), c.failed, fleetMaxFailures, c.killed, fleetConditions(ri))
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
			t.Fatalf("%s within 20 minutes: %d of %d healthy nodes on generation 2, %d of %d failing nodes failed it, %d of %d stale agents killed; %d kwok nodes NotReady now (%d at most); "+
				"%d pods running, %d of them not Ready (%d at most), %d on an older generation, %d on excluded nodes; %d restarts in progress, %d pending; %s\noperator log:\n%s",
				what, c.healthyOn, c.healthy, c.failed, c.failing, c.killed, c.stale, b.notReadyNodes(), tl.maxNotReady, running, unready, tl.maxUnready, old, excl, inProgress, pending,
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
