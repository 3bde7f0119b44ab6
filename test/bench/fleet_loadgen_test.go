//go:build bench

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/kit"
)

// fleetPodNode indexes the load generator's pod cache by node, so a node's tasks cost a
// lookup rather than a scan of every pod.
const fleetPodNode = "spec.nodeName"

// fleetAgents stands in for the node agents of every kwok node. Like the real agent it
// holds its node's Lease, installs what its NodeRuntime spec allows (allowedGeneration 0
// meaning the RuntimeImage's current generation, which is how the agent reads it), keeps
// reporting the generation it serves while it installs the next one, and writes its
// NodeRuntime status only when what it reports changes. A stale agent is killed as its wave
// lets it install a generation after its first: its Lease and its reports stop, so its node
// is stuck mid-rotation. Nodes are split among a fixed number of workers, each owning its
// nodes, so a node is never written by two goroutines.
type fleetAgents struct {
	c       client.Client
	cache   cache.Cache
	id, ns  string
	renew   time.Duration
	workers int
	nodes   []*fakeAgent
	byName  map[string]*fakeAgent

	leaseWrites, statusWrites, errs     atomic.Int64
	installing, maxInstalling, unstaged atomic.Int64
	lastErr                             atomic.Value
	wg                                  sync.WaitGroup
}

type fakeAgent struct {
	name        string
	uid, podUID types.UID
	fail, stale bool

	mu       sync.Mutex // what the test reads while the worker runs
	dead     bool
	killedAt time.Time
	gen      int64     // generation served
	since    time.Time // when it started serving gen
	failed   int64     // generation refused (failedGeneration)
	podGen   map[types.UID]int64

	digest  string // of the generation served
	install int64  // generation being installed
	// installDigest is the digest of install; rollback, whether install is a rollback
	// (composed from layers the node has: it never fails, and takes less time).
	installDigest string
	rollback      bool
	readyAt       time.Time
	written       *brewletv1.NodeRuntimeStatus // last status written, without timestamps
	lease         *coordinationv1.Lease
	renewed       time.Time
}

func newFleetAgents(c client.Client, ca cache.Cache, id, ns string, nodes []corev1.Node, failing, stale map[string]bool, renew time.Duration) *fleetAgents {
	f := &fleetAgents{c: c, cache: ca, id: id, ns: ns, renew: renew, workers: 32, byName: map[string]*fakeAgent{}}
	for _, n := range nodes {
		a := &fakeAgent{name: n.Name, uid: n.UID, podUID: types.UID(fmt.Sprintf("agent-%s", n.UID)), fail: failing[n.Name], stale: stale[n.Name],
			podGen: map[types.UID]int64{}}
		f.nodes = append(f.nodes, a)
		f.byName[n.Name] = a
	}
	return f
}

func (f *fleetAgents) start(ctx context.Context) {
	for w := 0; w < f.workers; w++ {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				ri := &brewletv1.RuntimeImage{}
				if err := f.cache.Get(ctx, client.ObjectKey{Name: f.id}, ri); err != nil {
					ri = nil
				}
				for i := w; i < len(f.nodes); i += f.workers {
					if ctx.Err() != nil {
						return
					}
					f.step(ctx, f.nodes[i], ri, time.Now())
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
}

func (f *fleetAgents) step(ctx context.Context, n *fakeAgent, ri *brewletv1.RuntimeImage, now time.Time) {
	if n.isDead() {
		return
	}
	if now.Sub(n.renewed) >= f.renew {
		f.heartbeat(ctx, n, now)
	}
	if ri == nil || ri.Status.Epoch != ri.UID || ri.Status.Generation < 1 {
		return
	}
	nrt := &brewletv1.NodeRuntime{}
	if err := f.cache.Get(ctx, client.ObjectKey{Name: n.name}, nrt); err != nil {
		return // the operator creates it for every node of the profile
	}
	i := slices.IndexFunc(nrt.Spec.Runtimes, func(d brewletv1.RuntimeDirective) bool { return d.ID == f.id })
	if i < 0 {
		return // not offered on this node (yet)
	}
	allowed := nrt.Spec.Runtimes[i].AllowedGeneration
	want := ri.Status.Generation
	if allowed > 0 && allowed < want {
		want = allowed
	}
	if want > n.gen && want != n.failed && want != n.install {
		if n.stale && n.gen > 0 {
			n.kill(now) // mid-rotation: allowed the new generation, never to report it
			return
		}
		if n.install == 0 {
			f.maxInstalling.Store(max(f.maxInstalling.Load(), f.installing.Add(1)))
		}
		if allowed == 0 && n.gen > 0 {
			f.unstaged.Add(1) // a later generation installed on "0 = current", outside any wave
		}
		n.install, n.readyAt = want, now.Add(time.Second+rand.N(4*time.Second))
		n.installDigest, n.rollback = kit.DigestN(int(want)), false // fleetImage's
		if want == ri.Status.Generation {
			n.installDigest = ri.Status.Digest
			if ri.Status.RollbackInEffect() != nil {
				n.rollback, n.readyAt = true, now.Add(200*time.Millisecond+rand.N(800*time.Millisecond))
			}
		}
	}
	if n.install > 0 && !now.Before(n.readyAt) {
		n.mu.Lock()
		if n.fail && n.gen > 0 && !n.rollback {
			n.failed = n.install
		} else {
			n.gen, n.digest, n.since = n.install, n.installDigest, now
		}
		n.mu.Unlock()
		n.install = 0
		f.installing.Add(-1)
	}
	st := f.status(ctx, n, ri.UID)
	if n.written != nil && equality.Semantic.DeepEqual(*n.written, st) {
		return
	}
	if err := f.patchStatus(ctx, n, st, now); err != nil {
		f.fail(err)
		return
	}
	n.written = &st
}

// status is what the node's agent reports: its runtime entry and one task per running
// container of the runtime, on the generation that was current when the pod started there.
func (f *fleetAgents) status(ctx context.Context, n *fakeAgent, epoch types.UID) brewletv1.NodeRuntimeStatus {
	e := brewletv1.NodeRuntimeEntry{ID: f.id, Epoch: epoch, Generation: n.install, State: string(vocab.StateInstalling)}
	if n.gen > 0 {
		e.State, e.Generation, e.Digest = string(vocab.StateReady), n.gen, n.digest
		if n.failed > n.gen {
			e.Reason, e.FailedGeneration = string(vocab.ReasonPlatformUnavailable), n.failed
			e.Message = fmt.Sprintf("generation %d refused, generation %d stays in use: the image index has no linux/arm64 manifest", n.failed, n.gen)
		}
	}
	pods := &corev1.PodList{}
	if err := f.cache.List(ctx, pods, client.InNamespace(f.ns), client.MatchingFields{fleetPodNode: n.name}, client.UnsafeDisableDeepCopy); err != nil {
		f.fail(err)
	}
	var tasks []brewletv1.NodeTask
	seen := map[types.UID]bool{}
	n.mu.Lock()
	for i := range pods.Items {
		p := &pods.Items[i]
		if n.gen == 0 || p.Annotations[vocab.AnnotationRuntimeImage] != f.id || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		g, ok := n.podGen[p.UID]
		if !ok {
			g = n.gen
			n.podGen[p.UID] = g
		}
		seen[p.UID] = true
		tasks = append(tasks, brewletv1.NodeTask{PodNamespace: p.Namespace, PodName: p.Name, PodUID: p.UID, ContainerName: "app",
			ID: f.id, Epoch: epoch, Generation: g})
	}
	for uid := range n.podGen {
		if !seen[uid] {
			delete(n.podGen, uid)
		}
	}
	n.mu.Unlock()
	slices.SortFunc(tasks, func(a, b brewletv1.NodeTask) int { return strings.Compare(a.PodName, b.PodName) })
	return brewletv1.NodeRuntimeStatus{NodeUID: n.uid, AgentPodUID: n.podUID, Complete: true, Runtimes: []brewletv1.NodeRuntimeEntry{e}, Tasks: tasks}
}

// patchStatus writes the whole status as a merge patch (no resourceVersion: the agent is
// the status's only writer, and the operator's spec writes must not make it retry).
func (f *fleetAgents) patchStatus(ctx context.Context, n *fakeAgent, st brewletv1.NodeRuntimeStatus, now time.Time) error {
	at := metav1.NewTime(now.Truncate(time.Second))
	until := metav1.NewTime(at.Add(5 * time.Minute))
	rts := slices.Clone(st.Runtimes)
	for i := range rts {
		if rts[i].State == string(vocab.StateReady) {
			rts[i].AuthorizedUntil = &until
		}
	}
	tasks := st.Tasks
	if tasks == nil {
		tasks = []brewletv1.NodeTask{} // a merge patch keeps a list that is left out
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"nodeUID": st.NodeUID, "agentPodUID": st.AgentPodUID,
		"observedAt": at, "complete": true, "runtimes": rts, "tasks": tasks}})
	if err != nil {
		return err
	}
	err = f.c.Status().Patch(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, client.RawPatch(types.MergePatchType, body))
	if err == nil {
		f.statusWrites.Add(1)
	}
	return err
}

func (f *fleetAgents) heartbeat(ctx context.Context, n *fakeAgent, now time.Time) {
	at := metav1.NewMicroTime(now)
	if n.lease == nil {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: kit.ChartNS, Name: vocab.AgentLeasePrefix + n.name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(string(n.podUID)), LeaseDurationSeconds: ptr.To[int32](15), AcquireTime: &at, RenewTime: &at}}
		if err := f.c.Create(ctx, l); err != nil {
			f.fail(err)
			return
		}
		f.leaseWrites.Add(1)
		// Spread the renewals over the period, as agents started at different times do.
		n.lease, n.renewed = l, now.Add(-rand.N(f.renew))
		return
	}
	n.lease.Spec.RenewTime = &at
	err := f.c.Update(ctx, n.lease)
	if apierrors.IsConflict(err) && f.c.Get(ctx, client.ObjectKeyFromObject(n.lease), n.lease) == nil {
		n.lease.Spec.RenewTime = &at
		err = f.c.Update(ctx, n.lease)
	}
	if err != nil {
		f.fail(err)
		return
	}
	f.leaseWrites.Add(1)
	n.renewed = now
}

func (f *fleetAgents) fail(err error) {
	f.errs.Add(1)
	f.lastErr.Store(err.Error())
}

func (n *fakeAgent) isDead() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dead
}

// kill stops the agent for good, as a node's agent pod killed and never replaced: no more
// Lease renewals, no more reports.
func (n *fakeAgent) kill(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dead, n.killedAt = true, now
}

// left reports whether the rotation goes on without node: it refuses new generations, or
// its agent was killed (the operator finds it silent).
func (f *fleetAgents) left(node string) bool {
	n := f.byName[node]
	return n != nil && (n.fail || n.isDead())
}

// fleetCounts is where the nodes stand against generation gen; last is when the last
// healthy node started serving it, lastKill when the last stale agent was killed. Healthy
// nodes are neither failing nor stale.
type fleetCounts struct {
	healthy, healthyOn, failing, failed, stale, killed int
	last, lastKill                                     time.Time
}

func (f *fleetAgents) counts(gen int64) fleetCounts {
	var c fleetCounts
	for _, n := range f.nodes {
		n.mu.Lock()
		switch {
		case n.fail:
			c.failing++
			if n.failed >= gen {
				c.failed++
			}
		case n.stale:
			c.stale++
			if n.dead {
				c.killed++
				c.lastKill = maxTime(c.lastKill, n.killedAt)
			}
		default:
			c.healthy++
			if n.gen >= gen {
				c.healthyOn++
				c.last = maxTime(c.last, n.since)
			}
		}
		n.mu.Unlock()
	}
	return c
}

// serving counts the nodes whose agent is alive (failing ones included) and those of them
// serving generation gen or newer, with when the last of those started serving it.
func (f *fleetAgents) serving(gen int64) (live, on int, last time.Time) {
	for _, n := range f.nodes {
		n.mu.Lock()
		if !n.dead {
			live++
			if n.gen >= gen {
				on++
				last = maxTime(last, n.since)
			}
		}
		n.mu.Unlock()
	}
	return live, on, last
}

// podGeneration is the generation a pod's container runs: the one its node served when it
// started there, or the one the node serves now for a pod its agent has not seen (it died).
func (f *fleetAgents) podGeneration(p *corev1.Pod) (int64, bool) {
	n := f.byName[p.Spec.NodeName]
	if n == nil {
		return 0, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if g, ok := n.podGen[p.UID]; ok {
		return g, true
	}
	return n.gen, n.dead && n.gen > 0
}

// reportedTasks counts the tasks in the statuses last written, on every node or (stale)
// on the stale agents' nodes only.
func (f *fleetAgents) reportedTasks(stale bool) int {
	total := 0
	for _, n := range f.nodes {
		n.mu.Lock()
		if !stale || n.stale {
			total += len(n.podGen)
		}
		n.mu.Unlock()
	}
	return total
}

// fleetSnap is what the counters said at one moment: the API server's requests, the
// operator's client requests and reconciles, its CPU time, the load generator's writes.
type fleetSnap struct {
	at             time.Time
	api, op        promSamples
	cpu            time.Duration
	leases, status int64
}

func (b *fleetBench) snapshot() fleetSnap {
	hc, err := rest.HTTPClientFor(b.cp.Config)
	kit.Must(b.t, err)
	resp, err := hc.Get(b.cp.Config.Host + "/metrics")
	kit.Must(b.t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	kit.Must(b.t, err)
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("API server /metrics: %s", resp.Status)
	}
	opBody, err := kit.ScrapeMetrics(b.t, b.cp, b.op.Metrics)
	kit.Must(b.t, err)
	return fleetSnap{at: time.Now(), api: scrape(b.t, string(body), "apiserver_request_total"),
		op: scrape(b.t, opBody, "controller_runtime_reconcile_total",
			"controller_runtime_reconcile_time_seconds_sum", "controller_runtime_reconcile_time_seconds_count"),
		cpu: procCPU(b.pid), leases: b.agents.leaseWrites.Load(), status: b.agents.statusWrites.Load()}
}

const fleetWriteVerbs = "POST|PUT|PATCH|DELETE|APPLY"

// total adds up the samples whose labels match the pairs kv (a value may list alternatives
// as "a|b"; the key "metric" matches the name). With res set they are the API server's
// writes (unless kv names a verb) of that resource and subresource.
func (ps promSamples) total(res, sub string, kv ...string) float64 {
	match := map[string]string{}
	if res != "" {
		match["resource"], match["subresource"], match["verb"] = res, sub, fleetWriteVerbs
	}
	for i := 0; i+1 < len(kv); i += 2 {
		match[kv[i]] = kv[i+1]
	}
	sum := 0.0
	for _, s := range ps {
		ok := true
		for k, v := range match {
			got := s.labels[k]
			if k == "metric" {
				got = s.metric
			}
			ok = ok && slices.Contains(strings.Split(v, "|"), got)
		}
		if ok {
			sum += s.value
		}
	}
	return sum
}

// writes lists the API server's writes since before, largest first.
func (ps promSamples) writes(before promSamples) string {
	sums := map[string]float64{}
	for sign, set := range map[float64]promSamples{1: ps, -1: before} {
		for _, s := range set {
			if l := s.labels; slices.Contains(strings.Split(fleetWriteVerbs, "|"), l["verb"]) {
				sums[fmt.Sprintf("%s %s/%s/%s %s", l["verb"], l["group"], l["resource"], l["subresource"], l["code"])] += sign * s.value
			}
		}
	}
	var lines []string
	for k, v := range sums {
		if v > 0 {
			lines = append(lines, fmt.Sprintf("%8.0f %s", v, k))
		}
	}
	slices.Sort(lines)
	slices.Reverse(lines)
	return strings.Join(lines, "\n")
}

// procOf finds the process started with arg (the operator's metrics address is unique to
// this test's replica).
func procOf(t *testing.T, arg string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	kit.Must(t, err)
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if pid, perr := strconv.Atoi(e.Name()); perr == nil && err == nil && slices.Contains(strings.Split(string(b), "\x00"), arg) {
			return pid
		}
	}
	t.Fatalf("no process with argument %s", arg)
	return 0
}

// procKiB reads a /proc/<pid>/status field in KiB (VmHWM: the peak resident set).
func procKiB(pid int, field string) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// procCPU is the process's user+system CPU time (utime and stime, in USER_HZ ticks of 10 ms).
func procCPU(pid int) time.Duration {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
