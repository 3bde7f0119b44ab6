package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/internal/operator/restarts"
	"brewlet.sh/brewlet/internal/vocab"
)

// The health gate with a budget of 0: the canary (brewlet.sh/restart-priority 100) is
// restarted first and never becomes available, so it fails its progress deadline; the
// other workloads are then not restarted (Pending, RestartsHalted), status names the
// failure and an event says so. Once the canary is fixed, a new digest is a new target:
// while spec.paused holds it nothing restarts; unpaused, restarts start afresh, canary
// first, and all of them succeed.
func TestRotationRestartsHaltWhenTheCanaryFails(t *testing.T) {
	w := startRestartWorld(t, 1, 8*time.Second, "--rotation-restart-max-failures=0")
	ctx, c := context.Background(), w.cp.Client
	epoch := w.approve(t)
	canary := restartDeployment("canary", true)
	canary.Annotations[vocab.AnnotationRestartPriority] = "100"
	// Its new pods never count as available: the rollout cannot finish.
	canary.Spec.MinReadySeconds = 3600
	canary.Spec.ProgressDeadlineSeconds = ptr.To[int32](7200)
	must(t, c.Create(ctx, canary))
	for _, name := range []string{"a-web", "b-api"} {
		must(t, c.Create(ctx, restartDeployment(name, true)))
	}
	w.waitRunning(t, 6)
	w.report(t, 1, epoch)

	follow := func(gen int64, want string) {
		t.Helper()
		w.follow(t, func() { w.report(t, gen, epoch) }, want)
	}
	w.rotate(t, 2, 2)
	follow(2, "Deployment/a-web=Pending Deployment/b-api=Pending Deployment/canary=Failed")
	got := getRI(t, c, "python")
	h := got.Status.Rotation.RestartsHalted
	if h == nil || h.Failed != 1 || h.MaxFailures != 0 || !strings.Contains(h.Message, "Deployment/"+restartNS+"/canary") {
		t.Fatalf("restartsHalted %+v", h)
	}
	for _, r := range got.Status.Rotation.Restarts {
		if r.Outcome == restarts.OutcomePending && r.Reason != string(vocab.ReasonRestartsHalted) {
			t.Errorf("%s waits without RestartsHalted: %+v", r.Name, r)
		}
	}
	expectEvent(t, c, "python", vocab.ReasonRestartsHalted, corev1.EventTypeWarning)
	// The halt holds: nothing else is patched while the budget is spent.
	for _, name := range []string{"a-web", "b-api"} {
		d := &appsv1.Deployment{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: restartNS, Name: name}, d))
		if v := d.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration]; v != "" {
			t.Errorf("%s was restarted under the halt: %s", name, v)
		}
	}

	// The fix, then a new digest: restarts start again, the canary first.
	d := &appsv1.Deployment{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: restartNS, Name: "canary"}, d))
	base := client.MergeFrom(d.DeepCopy())
	d.Spec.MinReadySeconds = 0
	must(t, c.Patch(ctx, d, base))
	// Paused first (spec.paused): the new target's restarts wait; unpaused, they run.
	setPaused := func(v bool) {
		t.Helper()
		cur := getRI(t, c, "python")
		base := client.MergeFrom(cur.DeepCopy())
		cur.Spec.Paused = v
		must(t, c.Patch(ctx, cur, base))
	}
	setPaused(true)
	w.rotate(t, 3, 3)
	follow(3, "Deployment/a-web=Pending Deployment/b-api=Pending Deployment/canary=Pending")
	for _, r := range getRI(t, c, "python").Status.Rotation.Restarts {
		if r.Reason != string(vocab.ReasonRotationPaused) {
			t.Errorf("%s waits without RotationPaused: %+v", r.Name, r)
		}
	}
	time.Sleep(3 * time.Second)
	if o := restartOutcomes(getRI(t, c, "python")); o != "Deployment/a-web=Pending Deployment/b-api=Pending Deployment/canary=Pending" {
		t.Fatalf("a restart started while paused: %s", o)
	}
	setPaused(false)
	follow(3, "Deployment/a-web=Succeeded Deployment/b-api=Succeeded Deployment/canary=Succeeded")
	if h := getRI(t, c, "python").Status.Rotation.RestartsHalted; h != nil {
		t.Errorf("restartsHalted %+v after a new digest", h)
	}
}
