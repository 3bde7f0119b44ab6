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
	// fleetHaltWatch is how long the halt is watched once no restart is in progress: three
	// of the restart controller's 15 s rechecks, any of which would start a restart.
	fleetHaltWatch = 45 * time.Second
)

// badTimeline is what the bad digest's phase saw.
type badTimeline struct {
	start, gen, complete, firstPatch, halted, settled time.Time
	nodes                                             brewletv1.RotationNodeCounts // at RotationComplete
	startedAtHalt, started                            int
	halt                                              *brewletv1.RestartsHalt
	counts                                            brewletv1.RestartCounts
	waiting, waitingHalted                            int // Pending records, and those with reason RestartsHalted
}

// badDigest rotates to a digest that hurts every restarted workload (generation 3, after
// generation 2 and its restarts finished) and follows it, touching nothing after the digest
// edit, until the operator's health gate halted the restarts and none is in progress. The
// agents killed in generation 2 stay dead: a rotation with dead nodes and a bad digest must
// need no human to finish or to stop.
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
// halts the rest; then no restart may be in progress, and none may start for
// fleetHaltWatch. It fails when one of those never comes.
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
			t.Fatalf("the rotation to generation %d halted: %s", fleetBadGen, p.Message)
		}
		rot := ri.Status.Rotation
		if rot == nil || rot.Target.Generation != fleetBadGen {
			rot = &brewletv1.RotationStatus{}
		}
		if rot.RestartCounts != nil {
			bt.counts = *rot.RestartCounts
		}
		if bt.counts.Succeeded > 0 {
			t.Fatalf("%d restart(s) onto the bad generation succeeded: admission policy %s did not hold its pods back", bt.counts.Succeeded, fleetBadPolicy)
		}
		if !bt.halted.IsZero() && bt.startedAtHalt == 0 {
			bt.startedAtHalt = patched
			t.Logf("restarts halted %s after the digest edit, %d started: %s", bt.halted.Sub(bt.start).Round(time.Second), patched, fleetConditions(ri))
		}
		switch {
		case bt.complete.IsZero() && now.Sub(bt.start) > 20*time.Minute:
			c := b.agents.counts(fleetBadGen)
			t.Fatalf("the rotation to generation %d did not complete within 20 minutes: %d of %d healthy nodes serve it, %d of %d failing nodes failed it; %s\noperator log:\n%s",
				fleetBadGen, c.healthyOn, c.healthy, c.failed, c.failing, fleetConditions(ri), b.operatorLog())
		case !bt.complete.IsZero() && bt.halted.IsZero() && now.Sub(bt.complete) > haltBound:
			t.Fatalf("restarts onto the bad generation not halted %s after RotationComplete (progress deadline %s, max failures %d): %d started, counts %+v; %s\noperator log:\n%s",
				now.Sub(bt.complete).Round(time.Second), b.cfg.deadline, fleetRestartMaxFailures, patched, bt.counts, fleetConditions(ri), b.operatorLog())
		case !bt.halted.IsZero() && bt.counts.InProgress > 0 && now.Sub(bt.halted) > b.cfg.deadline+2*time.Minute:
			t.Fatalf("%d restart(s) still in progress %s after the halt (progress deadline %s)", bt.counts.InProgress, now.Sub(bt.halted).Round(time.Second), b.cfg.deadline)
		case !bt.halted.IsZero() && bt.counts.InProgress == 0:
			if bt.settled.IsZero() {
				bt.settled = now
			}
			if now.Sub(bt.settled) >= fleetHaltWatch {
				if bt.halt = rot.RestartsHalted; bt.halt == nil {
					t.Fatalf("status.rotation.restartsHalted cleared without a new digest: %s", fleetConditions(ri))
				}
				bt.started = patched
				for _, r := range rot.Restarts {
					if r.Outcome == restarts.OutcomePending {
						bt.waiting++
						if r.Reason == string(vocab.ReasonRestartsHalted) {
							bt.waitingHalted++
						}
					}
				}
				return bt
			}
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
	available := 0
	for _, d := range deps.Items {
		if d.Annotations[vocab.AnnotationRestartOnRotation] == "true" && d.Status.AvailableReplicas >= 1 {
			available++
		}
	}
	evs := &eventsv1.EventList{}
	kit.Must(b.t, b.c.List(ctx, evs))
	haltEvents := 0
	for _, e := range evs.Items {
		if e.Reason == string(vocab.ReasonRestartsHalted) && e.Regarding.Name == fleetID && !e.CreationTimestamp.Before(&metav1.Time{Time: bt.start.Truncate(time.Second)}) {
			haltEvents++
		}
	}
	bound := fleetMaxConcurrent + fleetRestartMaxFailures
	c := bt.counts
	var s strings.Builder
	fmt.Fprintf(&s, "\n| bad digest: generation %d, its restarted pods refused (they never come up); restart maxFailures %d, maxConcurrent %d, progress deadline %s; %d agents still dead | value | note |\n|---|---|---|\n",
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
	row("restarts started: before the halt / in all", fmt.Sprintf("at most maxConcurrent + maxFailures = %d (a failure within the budget frees a slot); watched %s after the last settled",
		bound, fleetHaltWatch), "%d / %d", bt.startedAtHalt, bt.started)
	row("operator writes: Deployment patches", "API server count: one per restart started", "%.0f",
		after.api.total("deployments", "", "verb", "PATCH")-before.api.total("deployments", "", "verb", "PATCH"))
	row("restart outcomes: Failed / InProgress / Succeeded / Deferred", "restartCounts at the end", "%d / %d / %d / %d", c.Failed, c.InProgress, c.Succeeded, c.Deferred)
	row("workloads left un-restarted (Pending)", fmt.Sprintf("%d of the %d waiting records say RestartsHalted (must be all)", bt.waitingHalted, bt.waiting), "%d", c.Pending)
	row("restartsHalted: failed / maxFailures", "the halt as status shows it", "%d / %d", bt.halt.Failed, bt.halt.MaxFailures)
	row("RestartsHalted events on the RuntimeImage", "Warning, once per halt", "%d", haltEvents)
	row("opted-in Deployments available", "a failed restart keeps its old pod (one replica: maxUnavailable 0)", "%d of %d", available, b.cfg.workloads)
	row("operator CPU", fmt.Sprintf("over %s", after.at.Sub(before.at).Round(time.Second)), "%s", (after.cpu - before.cpu).Round(100*time.Millisecond))
	b.t.Log(s.String())
	fmt.Print(s.String())
	b.t.Logf("restartsHalted message: %s", bt.halt.Message)
}
