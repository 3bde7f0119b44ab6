//go:build bench

package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/restarts"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/kit"
)

const (
	fleetBadGen = 3
	// fleetBadPolicy refuses the bad generation's pods (denyGeneration).
	fleetBadPolicy = "bench-bad-digest"
)

// badTimeline is what the bad digest's phase saw, its rollback included.
type badTimeline struct {
	start, gen, complete, firstPatch, halted time.Time
	nodes                                    brewletv1.RotationNodeCounts // at RotationComplete
	startedAtHalt                            int
	halt                                     *brewletv1.RestartsHalt
	counts                                   brewletv1.RestartCounts // of generation 3 at the halt
	// The rollback: generation 4 assigned (rolledBack), every live node serving it
	// (serving, with how many), its RotationComplete, and its restarts back settled.
	rolledBack, serving, backComplete, settled time.Time
	live                                       int
	rollback                                   brewletv1.Rollback
	back                                       brewletv1.RestartCounts
	backSeen                                   bool // the restart controller counted the rollback's target
	atRollback                                 fleetSnap
}

// badDigest rotates to a digest that hurts every restarted workload (generation 3, after
// generation 2 and its restarts finished) and follows it, touching nothing after the digest
// edit: the operator's health gate halts the restarts, the operator rolls back (generation
// 4, generation 2's digest), every live node serves it and the workloads restarted onto
// generation 3 are restarted back. The agents killed in generation 2 stay dead: a rotation
// with dead nodes and a bad digest must need no human to finish, to stop or to go back.
func (b *fleetBench) badDigest() {
	b.denyGeneration(fleetBadGen)
	b.deps.retarget(fleetBadGen)
	before := b.snapshot()
	bt := b.followBadDigest()
	b.reportBadDigest(before, b.snapshot(), bt)
}

// denyGeneration stands in for a bad runtime digest: the API server refuses the pods of a
// workload restarted onto generation gen (its barrier annotation names gen), so the
// rollout never finishes, its old pod staying, as with new containers that crash or never
// become ready. The operator reads the rollout, never a pod's status, so the health gate
// sees the same; refusing the pod is what the API server can do on kwok, whose stages make
// every created pod Ready.
func (b *fleetBench) denyGeneration(gen int64) {
	t, ctx := b.t, context.Background()
	ann, msg := vocab.AnnotationRotatedToGeneration, fmt.Sprintf("bench: generation %d is the bad digest", gen)
	// The barrier is JSON ending in the generation (restarts.Barrier).
	expr := fmt.Sprintf(`!has(object.metadata.annotations) || !(%q in object.metadata.annotations) || !object.metadata.annotations[%q].endsWith('"generation":%d}')`, ann, ann, gen)
	fail := admissionv1.Fail
	kit.Must(t, b.c.Create(ctx, &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: fleetBadPolicy},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: fleetNS}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}},
			Validations: []admissionv1.Validation{{Expression: expr, Message: msg}}}}))
	kit.Must(t, b.c.Create(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: fleetBadPolicy},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: fleetBadPolicy, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}))
	// The API server picks policies up asynchronously: the digest changes once a pod of the
	// bad generation is refused, or the first restarts could slip through.
	tmpl := fleetDeployment("bad-digest-probe", true, 0).Spec.Template
	tmpl.Annotations[ann] = restarts.Barrier{ID: fleetID, Epoch: b.ri().UID, Generation: gen}.String()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "bad-digest-probe", Annotations: tmpl.Annotations}, Spec: tmpl.Spec}
	kit.Eventually(t, time.Minute, "pods of the bad generation refused", func() (bool, string) {
		err := b.c.Create(ctx, pod.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), msg), fmt.Sprint(err)
	})
}

// badPhase is what the watch saw of the bad generation: its assignment, RotationComplete,
// the halt, the first barrier patch and how many were patched.
func (d *fleetWatch) badPhase() (gen, complete, halted, first time.Time, nodes brewletv1.RotationNodeCounts, patched int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, at := range d.patched {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return d.gen, d.complete, d.halted, first, d.excluded, len(d.patched)
}

// followBadDigest edits the digest and waits: the rotation completes around the dead and
// failing nodes, restarts start, their rollouts miss the progress deadline, the health gate
// halts the rest, the operator rolls back, every live node serves the rollback generation,
// and every restart back is settled. It fails when one of those never comes.
func (b *fleetBench) followBadDigest() badTimeline {
	t := b.t
	bt := badTimeline{start: time.Now()}
	kit.UpdateRI(t, b.c, fleetID, func(ri *brewletv1.RuntimeImage) { ri.Spec.Source.Image = fleetImage(fleetBadGen) })
	// A restart started in a slot a failure freed (within the budget) fails a deadline
	// later; passes look again every 15 s.
	haltBound := 2*b.cfg.deadline + 3*time.Minute
	for {
		b.alive()
		now, ri := time.Now(), b.ri()
		var patched int
		bt.gen, bt.complete, bt.halted, bt.firstPatch, bt.nodes, patched = b.deps.badPhase()
		if p := meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionRotationProgressing)); p != nil && p.Reason == string(vocab.ReasonRotationHalted) {
			t.Fatalf("the rotation to generation %d halted: %s", ri.Status.Generation, p.Message)
		}
		rot := ri.Status.Rotation
		if rot == nil {
			rot = &brewletv1.RotationStatus{}
		}
		if rot.Target.Generation == fleetBadGen && rot.RestartCounts != nil {
			bt.counts = *rot.RestartCounts
			if bt.counts.Succeeded > 0 {
				t.Fatalf("%d restart(s) onto the bad generation succeeded: admission policy %s did not hold its pods back", bt.counts.Succeeded, fleetBadPolicy)
			}
			if rot.RestartsHalted != nil {
				bt.halt = rot.RestartsHalted
			}
		}
		if !bt.halted.IsZero() && bt.startedAtHalt == 0 {
			bt.startedAtHalt = patched
			t.Logf("restarts halted %s after the digest edit, %d started: %s", bt.halted.Sub(bt.start).Round(time.Second), patched, fleetConditions(ri))
		}
		rb := ri.Status.RollbackInEffect()
		if rb != nil && bt.rolledBack.IsZero() {
			bt.rolledBack, bt.rollback, bt.atRollback = now, *rb, b.snapshot()
			t.Logf("rolled back %s after the halt: %s", now.Sub(bt.halted).Round(100*time.Millisecond), rb.Message)
		}
		if rb != nil {
			if live, on, last := b.agents.serving(rb.Generation); bt.serving.IsZero() && on == live {
				bt.serving, bt.live = last, live
			}
			if rot.Target.Generation == rb.Generation && rot.RotationCompletedAt != nil && bt.backComplete.IsZero() {
				bt.backComplete = now
			}
			if rot.Target.Generation == rb.Generation && rot.RestartCounts != nil {
				bt.back, bt.backSeen = *rot.RestartCounts, true
			}
		}
		switch {
		case bt.complete.IsZero() && now.Sub(bt.start) > 20*time.Minute:
			c := b.agents.counts(fleetBadGen)
			t.Fatalf("the rotation to generation %d did not complete within 20 minutes: %d of %d healthy nodes serve it, %d of %d failing nodes failed it; %s\noperator log:\n%s",
				fleetBadGen, c.healthyOn, c.healthy, c.failed, c.failing, fleetConditions(ri), b.operatorLog())
		case !bt.complete.IsZero() && bt.halted.IsZero() && now.Sub(bt.complete) > haltBound:
			t.Fatalf("restarts onto the bad generation not halted %s after RotationComplete (progress deadline %s, max failures %d): %d started, counts %+v; %s\noperator log:\n%s",
				now.Sub(bt.complete).Round(time.Second), b.cfg.deadline, fleetRestartMaxFailures, patched, bt.counts, fleetConditions(ri), b.operatorLog())
		case !bt.halted.IsZero() && bt.rolledBack.IsZero() && now.Sub(bt.halted) > time.Minute:
			t.Fatalf("no rollback a minute after the halt: %s\noperator log:\n%s", fleetConditions(ri), b.operatorLog())
		case !bt.rolledBack.IsZero() && now.Sub(bt.rolledBack) > 10*time.Minute:
			live, on, _ := b.agents.serving(bt.rollback.Generation)
			t.Fatalf("the rollback did not settle within 10 minutes: %d of %d live nodes serve generation %d, restarts back %+v; %s",
				on, live, bt.rollback.Generation, bt.back, fleetConditions(ri))
		case !bt.serving.IsZero() && !bt.backComplete.IsZero() && bt.backSeen && bt.back.InProgress == 0 && bt.back.Pending == 0:
			bt.settled = now
			return bt
		}
		time.Sleep(time.Second)
	}
}

// reportBadDigest prints the bad digest's table (lines starting with "|").
func (b *fleetBench) reportBadDigest(before, after fleetSnap, bt badTimeline) {
	ctx := context.Background()
	since := func(at time.Time) string { return at.Sub(bt.start).Round(100 * time.Millisecond).String() }
	deps := &appsv1.DeploymentList{}
	kit.Must(b.t, b.cache.List(ctx, deps, client.InNamespace(fleetNS)))
	available, onBad := 0, 0
	for _, d := range deps.Items {
		if d.Annotations[vocab.AnnotationRestartOnRotation] == "true" && d.Status.AvailableReplicas >= 1 {
			available++
		}
		if br, ok := restarts.ParseBarrier(d.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration]); ok && br.Generation == fleetBadGen {
			onBad++
		}
	}
	evs := &eventsv1.EventList{}
	kit.Must(b.t, b.c.List(ctx, evs))
	haltEvents, rollbackEvents := 0, 0
	for _, e := range evs.Items {
		if e.Regarding.Name != fleetID || e.CreationTimestamp.Before(&metav1.Time{Time: bt.start.Truncate(time.Second)}) {
			continue
		}
		switch e.Reason {
		case string(vocab.ReasonRestartsHalted):
			haltEvents++
		case string(vocab.ReasonRolledBack):
			rollbackEvents++
		}
	}
	writes := func(from, to fleetSnap, res string) float64 {
		total := 0.0
		for _, verb := range []string{"PATCH", "PUT", "POST"} {
			total += to.api.total(res, "", "verb", verb) - from.api.total(res, "", "verb", verb)
		}
		return total
	}
	statusWrites := func(from, to fleetSnap, res string) float64 {
		total := 0.0
		for _, verb := range []string{"PATCH", "PUT"} {
			total += to.api.total(res, "status", "verb", verb) - from.api.total(res, "status", "verb", verb)
		}
		return total
	}
	c, back := bt.counts, bt.back
	var s strings.Builder
	fmt.Fprintf(&s, "\n| bad digest: generation %d, its restarted pods refused (they never come up); restart maxFailures %d, maxConcurrent %d, progress deadline %s; %d agents still dead; spec.onFailure RollBack (the default) | value | note |\n|---|---|---|\n",
		fleetBadGen, fleetRestartMaxFailures, fleetMaxConcurrent, b.cfg.deadline, b.cfg.stale)
	row := func(k, note, format string, v ...any) {
		fmt.Fprintf(&s, "| %s | %s | %s |\n", k, fmt.Sprintf(format, v...), note)
	}
	row("generation 3 assigned", "from the digest edit (all times below too); nothing done by hand after it", "%s", since(bt.gen))
	row("RotationComplete", fmt.Sprintf("%d nodes current; excluded: %d failing, %d stuck (agents dead since generation 2)", bt.nodes.Current, bt.nodes.Failed, bt.nodes.Stuck),
		"%s", since(bt.complete))
	row("first barrier patch", "after RotationComplete", "%s", bt.firstPatch.Sub(bt.complete).Round(100*time.Millisecond))
	row("restarts halted (status.rotation.restartsHalted)", fmt.Sprintf("%s after the first barrier patch: progress deadline %s, then the restart pass's 15 s recheck",
		bt.halted.Sub(bt.firstPatch).Round(time.Second), b.cfg.deadline), "%s", since(bt.halted))
	row("restarts onto generation 3 started before the halt", fmt.Sprintf("at most maxConcurrent + maxFailures = %d; outcomes then: %d Failed, %d InProgress",
		fleetMaxConcurrent+fleetRestartMaxFailures, c.Failed, c.InProgress), "%d", bt.startedAtHalt)
	row("rolled back: generation 4 assigned", fmt.Sprintf("after the halt; serves generation %d's digest again", bt.rollback.To.Generation),
		"%s", bt.rolledBack.Sub(bt.halted).Round(100*time.Millisecond))
	row("every live node serves generation 4", fmt.Sprintf("after the rollback; %d nodes, the 3 failing ones included (each composes it from layers it has: 0.2–1 s in the load generator)", bt.live),
		"%s", bt.serving.Sub(bt.rolledBack).Round(100*time.Millisecond))
	row("RotationComplete of generation 4", "after the rollback", "%s", bt.backComplete.Sub(bt.rolledBack).Round(100*time.Millisecond))
	row("restarts back settled", fmt.Sprintf("after the rollback; outcomes: %d Succeeded, %d Failed, %d Deferred", back.Succeeded, back.Failed, back.Deferred),
		"%s", bt.settled.Sub(bt.rolledBack).Round(100*time.Millisecond))
	row("first failure to every live node back", "the halt (the restarts' failures were seen at once) to every live node serving generation 4", "%s",
		bt.serving.Sub(bt.halted).Round(100*time.Millisecond))
	row("workloads restarted back / never restarted", fmt.Sprintf("of %d opted in; containers on generation 2 run generation 4's bytes and are left alone", b.cfg.workloads),
		"%d / %d", back.Succeeded+back.Failed+back.InProgress, b.cfg.workloads-int(back.Succeeded+back.Failed+back.InProgress+back.Deferred))
	row("Deployments whose template still names generation 3", "must be 0", "%d", onBad)
	row("operator writes in the rollback: NodeRuntime spec / RuntimeImage status / NodeProfile status", "from the rollback to the end", "%.0f / %.0f / %.0f",
		writes(bt.atRollback, after, "noderuntimes"), statusWrites(bt.atRollback, after, "runtimeimages"), statusWrites(bt.atRollback, after, "nodeprofiles"))
	row("operator writes: Deployment patches", "the whole phase: restarts onto 3, then back", "%.0f",
		after.api.total("deployments", "", "verb", "PATCH")-before.api.total("deployments", "", "verb", "PATCH"))
	row("RestartsHalted / RolledBack events on the RuntimeImage", "Warning, once each", "%d / %d", haltEvents, rollbackEvents)
	row("opted-in Deployments available", "a failed restart keeps its old pod (one replica: maxUnavailable 0)", "%d of %d", available, b.cfg.workloads)
	row("operator CPU", fmt.Sprintf("over %s", after.at.Sub(before.at).Round(time.Second)), "%s", (after.cpu - before.cpu).Round(100*time.Millisecond))
	b.t.Log(s.String())
	fmt.Print(s.String())
	if bt.halt != nil {
		b.t.Logf("restartsHalted message: %s", bt.halt.Message)
	}
	if onBad != 0 || back.Failed != 0 || rollbackEvents != 1 {
		b.t.Errorf("after the rollback: %d Deployments still name generation %d, %d restarts back failed, %d RolledBack events (want 0, 0, 1)", onBad, fleetBadGen, back.Failed, rollbackEvents)
	}
}
