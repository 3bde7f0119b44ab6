package restarts

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

const epoch = types.UID("e-1")

var (
	completed = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now       = completed.Add(20 * time.Minute)
	target    = Target{Barrier: Barrier{ID: "python", Epoch: epoch, Generation: 3}, CompletedAt: completed}
	policy    = Policy{MaxConcurrent: 2, ProgressDeadline: 10 * time.Minute, MaxFailures: 10}
	before    = completed.Add(-time.Hour)
)

func wl(name string, pods ...Pod) Workload {
	return Workload{Kind: "Deployment", Namespace: "ns", Name: name, Pods: pods}
}

// pod is a pod on node "n" (trusted when the tasks say so).
func pod(uid string, created time.Time) Pod {
	return Pod{UID: types.UID(uid), Node: "n", Created: created}
}

// running: node "n" reports (fresh, complete) these pods on these generations.
func running(gens map[string]int64) Tasks {
	t := Tasks{ByPod: map[PodOnNode][]brewletv1.NodeTask{}, Trusted: map[string]bool{"n": true}}
	for uid, g := range gens {
		e := epoch
		if g < 0 { // a previous epoch
			e, g = "e-0", -g
		}
		k := PodOnNode{Node: "n", UID: types.UID(uid)}
		t.ByPod[k] = append(t.ByPod[k], brewletv1.NodeTask{PodUID: types.UID(uid), ID: "python", Epoch: e, Generation: g})
	}
	return t
}

func barrier(gen int64, e types.UID) string {
	return Barrier{ID: "python", Epoch: e, Generation: gen}.String()
}

// summary renders actions as "name:outcome[+patch]" in order.
func summary(actions []Action) string {
	var out []string
	for _, a := range actions {
		s := a.Workload.Name + ":" + a.Record.Outcome
		if a.Patch {
			s += "+patch"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func TestDecide(t *testing.T) {
	started := &metav1.Time{Time: now.Add(-5 * time.Minute)}
	late := &metav1.Time{Time: now.Add(-11 * time.Minute)}
	for _, tc := range []struct {
		name      string
		workloads []Workload
		tasks     Tasks
		previous  []brewletv1.WorkloadRestart
		inFlight  int
		want      string
	}{
		{name: "a pod on an older generation is restarted", workloads: []Workload{wl("a", pod("p1", before))},
			tasks: running(map[string]int64{"p1": 2}), want: "a:InProgress+patch"},
		{name: "a pod of a previous epoch is restarted", workloads: []Workload{wl("a", pod("p1", before))},
			tasks: running(map[string]int64{"p1": -7}), want: "a:InProgress+patch"},
		{name: "pods on the target: nothing to do or report", workloads: []Workload{wl("a", pod("p1", before))},
			tasks: running(map[string]int64{"p1": 3})},
		{name: "a pod on a node without a report, older than the completion, is restarted (to be safe)",
			workloads: []Workload{wl("a", pod("p1", before))}, want: "a:InProgress+patch"},
		{name: "a pod on a node without a report, created after the completion, is left alone",
			workloads: []Workload{wl("a", pod("p1", completed.Add(time.Second)))}},
		{name: "a pod a trusted node does not list runs nothing of the runtime: left alone",
			workloads: []Workload{wl("a", pod("p1", before))}, tasks: running(map[string]int64{"other": 2})},
		{name: "an unscheduled pod is left alone",
			workloads: []Workload{wl("a", Pod{UID: "p1", Created: before})}},
		{name: "OnDelete is not applicable", workloads: []Workload{func() Workload { w := wl("a", pod("p1", before)); w.NotApplicable = true; return w }()},
			want: "a:NotApplicable"},
		{name: "paused is deferred", workloads: []Workload{func() Workload { w := wl("a", pod("p1", before)); w.Deferred = "paused"; return w }()},
			want: "a:Deferred"},
		{name: "a barrier of another epoch is never overwritten",
			workloads: []Workload{func() Workload { w := wl("a", pod("p1", before)); w.Barrier = barrier(9, "e-0"); return w }()},
			want:      "a:Deferred"},
		{name: "patched for the target and rolled out: succeeded",
			workloads: []Workload{func() Workload { w := wl("a"); w.Barrier, w.RolledOut = barrier(3, epoch), true; return w }()},
			previous:  []brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "ns", Name: "a", Outcome: OutcomeInProgress, StartedAt: started}},
			want:      "a:Succeeded"},
		{name: "patched, rolling out within the deadline: in progress, no second patch",
			workloads: []Workload{func() Workload { w := wl("a", pod("p1", before)); w.Barrier = barrier(3, epoch); return w }()},
			tasks:     running(map[string]int64{"p1": 2}),
			previous:  []brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "ns", Name: "a", Outcome: OutcomeInProgress, StartedAt: started}},
			want:      "a:InProgress"},
		{name: "patched before an operator restart (no record): in progress, no second patch",
			workloads: []Workload{func() Workload { w := wl("a", pod("p1", before)); w.Barrier = barrier(3, epoch); return w }()},
			tasks:     running(map[string]int64{"p1": 2}), want: "a:InProgress"},
		{name: "past the progress deadline: failed, slot freed for the next",
			workloads: []Workload{func() Workload { w := wl("a", pod("p1", before)); w.Barrier = barrier(3, epoch); return w }(),
				wl("b", pod("p2", before)), wl("c", pod("p3", before))},
			tasks:    running(map[string]int64{"p1": 2, "p2": 2, "p3": 2}),
			previous: []brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "ns", Name: "a", Outcome: OutcomeInProgress, StartedAt: late}},
			want:     "a:Failed b:InProgress+patch c:InProgress+patch"},
		{name: "at most MaxConcurrent at once, counting other runtimes' restarts",
			workloads: []Workload{wl("c", pod("p3", before)), wl("a", pod("p1", before)), wl("b", pod("p2", before))},
			tasks:     running(map[string]int64{"p1": 2, "p2": 1, "p3": 2}), inFlight: 1,
			want: "a:InProgress+patch b:Pending c:Pending"},
		{name: "a record of an earlier target holds no slot and lends no deadline",
			workloads: []Workload{wl("a", pod("p1", before)), wl("b", pod("p2", before))},
			tasks:     running(map[string]int64{"p1": 2, "p2": 2}),
			previous: []brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "ns", Name: "a", Outcome: OutcomeInProgress,
				StartedAt: &metav1.Time{Time: completed.Add(-time.Hour)}}},
			want: "a:InProgress+patch b:InProgress+patch"},
		{name: "patched by an earlier pass, the cache not showing it yet: no second patch",
			workloads: []Workload{wl("a", pod("p1", before)), wl("b", pod("p2", before)), wl("c", pod("p3", before))},
			tasks:     running(map[string]int64{"p1": 2, "p2": 2, "p3": 2}),
			previous:  []brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "ns", Name: "a", Outcome: OutcomeInProgress, StartedAt: started, Message: "restarting"}},
			want:      "a:InProgress b:InProgress+patch c:Pending"},
		{name: "refused patches wait behind the others",
			workloads: []Workload{wl("a", pod("p1", before)), wl("b", pod("p2", before)), wl("c", pod("p3", before))},
			tasks:     running(map[string]int64{"p1": 2, "p2": 2, "p3": 2}),
			previous: []brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "ns", Name: "a", Outcome: OutcomePending, Reason: ReasonPatchRefused, Message: "refused"},
				{Kind: "Deployment", Namespace: "ns", Name: "b", Outcome: OutcomePending, Reason: ReasonPatchRefused, Message: "refused"}},
			// c, never refused, gets a slot before them although it sorts last.
			want: "a:InProgress+patch b:Pending c:InProgress+patch"},
		{name: "system namespaces are never restarted",
			workloads: []Workload{func() Workload { w := wl("a", pod("p1", before)); w.Namespace = "kube-system"; return w }()},
			tasks:     running(map[string]int64{"p1": 2}), want: "a:NotApplicable"},
		{name: "succeeded stays succeeded when its pods later lose readiness: no slot, no new deadline",
			workloads: []Workload{func() Workload { w := wl("a", pod("p1", before)); w.Barrier = barrier(3, epoch); return w }(), wl("b", pod("p2", before))},
			tasks:     running(map[string]int64{"p1": 3, "p2": 2}), inFlight: 1,
			previous: []brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "ns", Name: "a", Outcome: OutcomeSucceeded, StartedAt: late, Message: "done"}},
			want:     "a:Succeeded b:InProgress+patch"},
		{name: "a pod on a node still installing or excluded defers the restart",
			workloads: []Workload{wl("a", pod("p1", before)), wl("b", Pod{Name: "p2", UID: "p2", Node: "bad", Created: before}),
				wl("c", Pod{Name: "p3", UID: "p3", Node: "slow", Created: before})},
			tasks: func() Tasks {
				t := running(map[string]int64{"p1": 2})
				t.Unsettled = map[string]string{"bad": "excluded", "slow": "still installing"}
				return t
			}(),
			want: "a:InProgress+patch b:Deferred c:Deferred"},
		{name: "a newer rotation supersedes an earlier barrier",
			workloads: []Workload{func() Workload { w := wl("a", pod("p1", before)); w.Barrier = barrier(2, epoch); return w }()},
			tasks:     running(map[string]int64{"p1": 2}), want: "a:InProgress+patch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(target, tc.workloads, tc.tasks, tc.previous, tc.inFlight, policy, now)
			if s := summary(got); s != tc.want {
				t.Fatalf("got %q, want %q", s, tc.want)
			}
			for _, a := range got {
				if a.Patch && (a.Record.StartedAt == nil || !a.Record.StartedAt.Time.Equal(now)) {
					t.Errorf("%s: patched without startedAt now: %+v", a.Workload.Name, a.Record)
				}
				if a.Record.Message == "" {
					t.Errorf("%s: no message", a.Workload.Name)
				}
			}
		})
	}
}

func TestTasksOfTrustsOnlyFreshCompleteReports(t *testing.T) {
	rep := func(node string, complete bool) brewletv1.NodeRuntime {
		n := brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: node}}
		n.Status.Complete = complete
		n.Status.Tasks = []brewletv1.NodeTask{{PodUID: types.UID("pod-" + node), ID: "python", Epoch: epoch, Generation: 3},
			{PodUID: types.UID("other-" + node), ID: "node-22", Epoch: "x", Generation: 1}}
		return n
	}
	tasks := TasksOf(target, []brewletv1.NodeRuntime{rep("fresh", true), rep("stale", true), rep("incomplete", false)},
		func(n string) bool { return n != "stale" }, nil, completed.Add(time.Hour))
	if len(tasks.ByPod) != 1 || len(tasks.ByPod[PodOnNode{"fresh", "pod-fresh"}]) != 1 || !tasks.Trusted["fresh"] || len(tasks.Trusted) != 1 {
		t.Fatalf("tasks %+v: only the fresh, complete node's python task counts", tasks)
	}
	// The stale node's pod is then unreported: restarted when older than the completion.
	got := Decide(target, []Workload{wl("a", Pod{UID: "pod-stale", Node: "stale", Created: before})}, tasks, nil, 0, policy, now)
	if s := summary(got); s != "a:InProgress+patch" {
		t.Fatalf("pod on a stale node: %s", s)
	}
}

func TestBarrierRoundTrip(t *testing.T) {
	b := Barrier{ID: "python", Epoch: epoch, Generation: 3}
	if got, ok := ParseBarrier(b.String()); !ok || got != b {
		t.Fatalf("round trip %v %v", got, ok)
	}
	for _, bad := range []string{"", "{", `{"epoch":"x"}`, "null", `"python"`} {
		if _, ok := ParseBarrier(bad); ok {
			t.Errorf("ParseBarrier(%q) accepted", bad)
		}
	}
}

func TestTargetOnlyAfterCompletion(t *testing.T) {
	ri := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "python", UID: epoch}}
	ri.Status = brewletv1.RuntimeImageStatus{Epoch: epoch, Generation: 3,
		Rotation: &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: 3}}}
	if _, ok := TargetOf(ri); ok {
		t.Fatal("a target before the rotation completed")
	}
	at := metav1.NewTime(completed)
	ri.Status.Rotation.RotationCompletedAt = &at
	ri.Status.Conditions = []metav1.Condition{{Type: string(vocab.ConditionRotationComplete), Status: metav1.ConditionTrue}}
	tg, ok := TargetOf(ri)
	if !ok || tg.Generation != 3 || !tg.CompletedAt.Equal(completed) {
		t.Fatalf("target %+v %v", tg, ok)
	}
	ri.Status.Generation = 4 // a newer rotation started: its completion is not this one's
	if _, ok := TargetOf(ri); ok {
		t.Fatal("a target from an earlier rotation's completion")
	}
}

func TestRecordsBounded(t *testing.T) {
	var ws []Workload
	gens := map[string]int64{}
	for i := 0; i < MaxRecorded+10; i++ {
		uid := fmt.Sprintf("p%03d", i)
		ws = append(ws, wl(fmt.Sprintf("w%03d", i), pod(uid, before)))
		gens[uid] = 1
	}
	tasks := running(gens)
	// Ten settled earlier: five failed, five succeeded (barrier set, not rolled out now).
	var previous []brewletv1.WorkloadRestart
	for i := 0; i < 10; i++ {
		ws[MaxRecorded+i].Barrier = barrier(3, epoch)
		outcome := OutcomeFailed
		if i%2 == 1 {
			outcome = OutcomeSucceeded
		}
		previous = append(previous, brewletv1.WorkloadRestart{Kind: "Deployment", Namespace: "ns", Name: ws[MaxRecorded+i].Name,
			Outcome: outcome, StartedAt: &metav1.Time{Time: now.Add(-15 * time.Minute)}, Message: "settled"})
	}
	recs, counts := Records(Decide(target, ws, tasks, previous, 0, policy, now))
	if len(recs) != MaxRecorded {
		t.Fatalf("%d records", len(recs))
	}
	if want := (brewletv1.RestartCounts{InProgress: 2, Pending: MaxRecorded - 2, Failed: 5, Succeeded: 5}); counts == nil || *counts != want {
		t.Fatalf("counts %+v, want %+v", counts, want)
	}
	// Settled outcomes are kept before the waiting ones: a dropped one could take a slot again.
	for i, want := range []string{OutcomeInProgress, OutcomeInProgress, OutcomeFailed, OutcomeFailed, OutcomeFailed, OutcomeFailed, OutcomeFailed,
		OutcomeSucceeded, OutcomeSucceeded, OutcomeSucceeded, OutcomeSucceeded, OutcomeSucceeded, OutcomePending} {
		if recs[i].Outcome != want {
			t.Fatalf("record %d is %s, want %s", i, recs[i].Outcome, want)
		}
	}
	// The two that hold slots come first, whatever their names.
	if recs[0].Outcome != OutcomeInProgress || recs[1].Outcome != OutcomeInProgress || InProgress(recs) != policy.MaxConcurrent {
		t.Fatalf("kept records start with %+v, %+v", recs[0], recs[1])
	}
}

// Nodes reporting the target's epoch without serving the target are unsettled, with why;
// other epochs, revoked entries and current nodes are not.
func TestTasksOfNotesUnsettledNodes(t *testing.T) {
	rep := func(node string, e brewletv1.NodeRuntimeEntry) brewletv1.NodeRuntime {
		n := brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: node}}
		e.ID = "python"
		n.Status.Runtimes = []brewletv1.NodeRuntimeEntry{e}
		n.Status.ObservedAt = &metav1.Time{Time: completed}
		return n
	}
	late := metav1.NewTime(completed.Add(-time.Minute))
	timedOut := rep("timed-out", brewletv1.NodeRuntimeEntry{Epoch: epoch, Generation: 3, State: string(vocab.StateInstalling)})
	timedOut.Spec.Runtimes = []brewletv1.RuntimeDirective{{ID: "python", AllowedGeneration: 3, InstallBy: &late}}
	reports := []brewletv1.NodeRuntime{
		timedOut,
		rep("silent", brewletv1.NodeRuntimeEntry{Epoch: epoch, Generation: 2, State: string(vocab.StateReady)}),
		rep("current", brewletv1.NodeRuntimeEntry{Epoch: epoch, Generation: 3, State: string(vocab.StateReady)}),
		rep("installing", brewletv1.NodeRuntimeEntry{Epoch: epoch, Generation: 3, State: string(vocab.StateInstalling)}),
		rep("failed", brewletv1.NodeRuntimeEntry{Epoch: epoch, Generation: 2, FailedGeneration: 3, State: string(vocab.StateReady), Reason: "LayerPathViolation"}),
		rep("waiting", brewletv1.NodeRuntimeEntry{Epoch: epoch, Generation: 2, State: string(vocab.StateReady)}),
		rep("revoked", brewletv1.NodeRuntimeEntry{Epoch: epoch, Generation: 2, State: string(vocab.StateRevoked)}),
		rep("other-epoch", brewletv1.NodeRuntimeEntry{Epoch: "e-0", Generation: 1, State: string(vocab.StateReady)}),
	}
	// Stuck nodes (past installBy, or silent) are not unsettled: their workloads restart.
	got := TasksOf(target, reports, func(n string) bool { return n != "silent" }, func(n string) bool { return n == "silent" }, completed).Unsettled
	var names []string
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "failed,installing,waiting" || !strings.Contains(got["failed"], "LayerPathViolation") {
		t.Fatalf("unsettled %v", got)
	}
}

// A node speaks only for the pods bound to it: node "liar" reporting a pod of node "n" on an
// old generation forces no restart, and reporting it current hides nothing.
func TestTasksOfReadsANodeOnlyForItsOwnPods(t *testing.T) {
	rep := func(node string, uid string, gen int64) brewletv1.NodeRuntime {
		n := brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: node}}
		n.Status.Complete = true
		n.Status.Tasks = []brewletv1.NodeTask{{PodUID: types.UID(uid), ID: "python", Epoch: epoch, Generation: gen}}
		return n
	}
	fresh := func(string) bool { return true }
	onN := Pod{UID: "p1", Node: "n", Created: before}
	for _, tc := range []struct {
		name    string
		reports []brewletv1.NodeRuntime
		restart bool
	}{
		{"another node claims the pod runs an old generation", []brewletv1.NodeRuntime{rep("n", "p1", target.Generation), rep("liar", "p1", 1)}, false},
		{"another node claims the pod is current, its own node says old", []brewletv1.NodeRuntime{rep("n", "p1", 1), rep("liar", "p1", target.Generation)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tasks := TasksOf(target, tc.reports, fresh, nil, completed)
			if got := needsRestart(wl("a", onN), target, tasks); got != tc.restart {
				t.Fatalf("needsRestart = %v, want %v (tasks %+v)", got, tc.restart, tasks.ByPod)
			}
		})
	}
}

// The health gate: once more restarts of the target failed than MaxFailures, nothing new
// starts, running restarts go on, and the waiting ones say why. Restarts start by
// priority, higher first, so a canary fails before the rest is touched.
func TestDecideHealthGate(t *testing.T) {
	late := &metav1.Time{Time: now.Add(-11 * time.Minute)}
	started := &metav1.Time{Time: now.Add(-time.Minute)}
	failedA := brewletv1.WorkloadRestart{Kind: "Deployment", Namespace: "ns", Name: "a", Outcome: OutcomeInProgress, StartedAt: late}
	patched := func(name string) Workload {
		w := wl(name, pod("p-"+name, before))
		w.Barrier = barrier(3, epoch)
		return w
	}
	tasks := running(map[string]int64{"p-a": 2, "p-b": 2, "p-c": 2, "p-d": 2})
	for _, tc := range []struct {
		name      string
		workloads []Workload
		previous  []brewletv1.WorkloadRestart
		max       int
		want      string
		halted    bool
	}{
		{"one failure within a budget of 1: the others start", []Workload{patched("a"), wl("b", pod("p-b", before))},
			[]brewletv1.WorkloadRestart{failedA}, 1, "a:Failed b:InProgress+patch", false},
		{"one failure over a budget of 0: nothing new starts", []Workload{patched("a"), wl("b", pod("p-b", before)), wl("c", pod("p-c", before))},
			[]brewletv1.WorkloadRestart{failedA}, 0, "a:Failed b:Pending c:Pending", true},
		{"a restart in progress finishes under a halt", []Workload{patched("a"), patched("d"), wl("b", pod("p-b", before))},
			[]brewletv1.WorkloadRestart{failedA, {Kind: "Deployment", Namespace: "ns", Name: "d", Outcome: OutcomeInProgress, StartedAt: started}},
			0, "a:Failed b:Pending d:InProgress", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{MaxConcurrent: 5, ProgressDeadline: 10 * time.Minute, MaxFailures: tc.max}
			got := Decide(target, tc.workloads, tasks, tc.previous, 0, p, now)
			if s := summary(got); s != tc.want {
				t.Fatalf("got %q, want %q", s, tc.want)
			}
			h := HaltOf(got, target, p)
			if (h != nil) != tc.halted {
				t.Fatalf("halt %+v, want halted=%v", h, tc.halted)
			}
			if h == nil {
				return
			}
			if h.Failed != 1 || h.MaxFailures != int32(tc.max) || !strings.Contains(h.Message, "Deployment/ns/a") {
				t.Errorf("halt %+v", h)
			}
			for _, a := range got {
				if a.Record.Outcome == OutcomePending && (a.Record.Reason != string(vocab.ReasonRestartsHalted) || a.Record.Message != h.Message) {
					t.Errorf("%s waits without saying why: %+v", a.Workload.Name, a.Record)
				}
			}
		})
	}
}

// New containers failing to start on the target on more nodes than the rollout budget
// (the RuntimeImage's status.rotation.failedStarts) halt restarts as failed restarts do.
func TestDecideHaltsOnFailedStarts(t *testing.T) {
	tg := target
	tg.FailedStarts = "2 pod(s) on 2 node(s) had a container exit with an error"
	tasks := running(map[string]int64{"p-a": 2})
	p := Policy{MaxConcurrent: 5, ProgressDeadline: 10 * time.Minute, MaxFailures: 1}
	got := Decide(tg, []Workload{wl("a", pod("p-a", before))}, tasks, nil, 0, p, now)
	if s := summary(got); s != "a:Pending" {
		t.Fatalf("got %q, want a:Pending", s)
	}
	h := HaltOf(got, tg, p)
	if h == nil || h.Failed != 0 || !strings.Contains(h.Message, tg.FailedStarts) || got[0].Record.Reason != string(vocab.ReasonRestartsHalted) {
		t.Fatalf("halt %+v, record %+v", h, got[0].Record)
	}
	if h := HaltOf(got, target, p); h != nil {
		t.Fatalf("halted without failed starts: %+v", h)
	}
}

func TestRestartPriority(t *testing.T) {
	for v, want := range map[string]int{"": 0, "10": 10, "-5": -5, "1000": 1000, "1001": 0, "-1001": 0, "ten": 0, "1e3": 0, " 5": 0,
		"99999999999999999999": 0} {
		if got := PriorityOf(v); got != want {
			t.Errorf("PriorityOf(%q) = %d, want %d", v, got, want)
		}
	}
	// One slot: the highest priority takes it, whatever the names say.
	withPrio := func(name string, prio int) Workload {
		w := wl(name, pod("p-"+name, before))
		w.Priority = prio
		return w
	}
	got := Decide(target, []Workload{withPrio("a", 0), withPrio("b", -1), withPrio("z-canary", 100)},
		running(map[string]int64{"p-a": 2, "p-b": 2, "p-z-canary": 2}), nil, 0, Policy{MaxConcurrent: 1, ProgressDeadline: time.Minute, MaxFailures: 1}, now)
	if s := summary(got); s != "a:Pending b:Pending z-canary:InProgress+patch" {
		t.Fatalf("got %q: the canary goes first", s)
	}
}

func FuzzPriorityOf(f *testing.F) {
	for _, s := range []string{"", "0", "-1000", "1000", "x", "+3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if p := PriorityOf(v); p < minPriority || p > maxPriority {
			t.Fatalf("PriorityOf(%q) = %d out of bounds", v, p)
		}
	})
}

// spec.paused starts no restart; the one in progress goes on.
func TestDecidePaused(t *testing.T) {
	paused := target
	paused.Pause = specPaused(paused.ID)
	inProgress := wl("a", pod("p-a", before))
	inProgress.Barrier = barrier(3, epoch)
	got := Decide(paused, []Workload{inProgress, wl("b", pod("p-b", before))}, running(map[string]int64{"p-a": 2, "p-b": 2}),
		[]brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "ns", Name: "a", Outcome: OutcomeInProgress, StartedAt: &metav1.Time{Time: now.Add(-time.Minute)}}},
		0, policy, now)
	if s := summary(got); s != "a:InProgress b:Pending" {
		t.Fatalf("got %q", s)
	}
	if r := got[1].Record; r.Reason != string(vocab.ReasonRotationPaused) || !strings.Contains(r.Message, "spec.paused") {
		t.Errorf("paused record %+v", r)
	}
}

// A soak period after the rotation completed holds every restart; it counts from
// rotationCompletedAt (stored status), so an operator restart does not extend it.
func TestDecideSoak(t *testing.T) {
	p := policy
	p.Soak = 30 * time.Minute // target completed 20 minutes before now
	ws := []Workload{wl("a", pod("p1", before))}
	tasks := running(map[string]int64{"p1": 2})
	got := Decide(target, ws, tasks, nil, 0, p, now)
	if s := summary(got); s != "a:Pending" || got[0].Record.Reason != ReasonSoaking || !strings.Contains(got[0].Record.Message, "soak period of 30m0s") {
		t.Fatalf("soaking: %q %+v", s, got[0].Record)
	}
	p.Soak = 10 * time.Minute
	if s := summary(Decide(target, ws, tasks, nil, 0, p, now)); s != "a:InProgress+patch" {
		t.Fatalf("after the soak: %q", s)
	}
}

// The fleet pause holds every restart like spec.paused, with its own message.
func TestDecideFleetPause(t *testing.T) {
	held := target
	held.Pause = "RuntimeClass brewlet has brewlet.sh/rotations-paused=\"true\""
	got := Decide(held, []Workload{wl("a", pod("p1", before))}, running(map[string]int64{"p1": 2}), nil, 0, policy, now)
	if s := summary(got); s != "a:Pending" || got[0].Record.Reason != string(vocab.ReasonRotationPaused) || got[0].Record.Message != held.Pause {
		t.Fatalf("fleet pause: %q %+v", s, got[0].Record)
	}
}

// A rollback target (generation 3 serving generation 1's digest again after generation 2
// failed): pods on generation 1 run its bytes and stay; pods on the failed generation are
// restarted back at once, whatever the soak period and the restart window say.
func TestDecideRollback(t *testing.T) {
	back := target
	back.Rollback, back.Same, back.Bad = true, 1, 2
	p := policy
	p.Soak = time.Hour
	w, err := ParseWindow("0 2 * * *", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	p.Window = w
	looping := wl("looping", pod("p4", before)) // restarted onto 2, its container between two crashes
	looping.Barrier = barrier(2, epoch)
	ws := []Workload{wl("never-moved", pod("p1", before)), wl("moved", pod("p2", before)), wl("older", pod("p3", before)), looping}
	p.MaxConcurrent = 3
	got := Decide(back, ws, running(map[string]int64{"p1": 1, "p2": 2, "p3": -1}), nil, 0, p, now)
	if s := summary(got); s != "looping:InProgress+patch moved:InProgress+patch older:InProgress+patch" {
		t.Fatalf("rollback restarts: %q", s)
	}
	// The same tasks for an ordinary target: generation 1 is old, and the soak holds all.
	if s := summary(Decide(target, ws, running(map[string]int64{"p1": 1, "p2": 2, "p3": -1}), nil, 0, p, now)); s != "moved:Pending never-moved:Pending older:Pending" {
		t.Fatalf("ordinary target: %q", s)
	}
}
