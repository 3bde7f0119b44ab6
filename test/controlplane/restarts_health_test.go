package controlplane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/restarts"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/kit"
)

// After a soak period of 12 s, the health gate with a budget of 0: the canary (brewlet.sh/restart-priority 100) is
// restarted first and never becomes available, so it fails its progress deadline; the
// other workloads are then not restarted (Pending, RestartsHalted), status names the
// failure and an event says so. Once the canary is fixed, a new digest is a new target:
// while spec.paused holds it nothing restarts; unpaused, restarts start afresh, canary
// first, and all of them succeed.
func TestRotationRestartsHaltWhenTheCanaryFails(t *testing.T) {
	// A deadline long enough for a loaded machine's rollouts, short enough to wait for.
	w := startRestartWorld(t, 1, 20*time.Second, "--rotation-restart-max-failures=0", "--rotation-restart-soak=12s")
	ctx, c := context.Background(), w.cp.Client
	epoch := w.approve(t)
	// This test holds the halt: nodes keep the generation (the rollback is
	// TestRotationRestartFailsOnACrashLoop's).
	cur := getRI(t, c, "python")
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.OnFailure = brewletv1.OnFailureHalt
	kit.Must(t, c.Patch(ctx, cur, patch))
	canary := restartDeployment("canary", true)
	canary.Annotations[vocab.AnnotationRestartPriority] = "100"
	// Its new pods never count as available: the rollout cannot finish.
	canary.Spec.MinReadySeconds = 3600
	canary.Spec.ProgressDeadlineSeconds = ptr.To[int32](7200)
	kit.Must(t, c.Create(ctx, canary))
	for _, name := range []string{"a-web", "b-api"} {
		kit.Must(t, c.Create(ctx, restartDeployment(name, true)))
	}
	w.waitRunning(t, 6)
	w.report(t, 1, epoch)

	follow := func(gen int64, want string) {
		t.Helper()
		w.follow(t, func() { w.reportState(t, gen, epoch, vocab.StateReady) }, want)
	}
	w.rotate(t, 2, 2)
	// The soak period first: the rotation completed, nothing restarts yet.
	follow(2, "Deployment/a-web=Pending Deployment/b-api=Pending Deployment/canary=Pending")
	for _, r := range getRI(t, c, "python").Status.Rotation.Restarts {
		if r.Reason != restarts.ReasonSoaking {
			t.Errorf("%s waits without Soaking: %+v", r.Name, r)
		}
	}
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
		kit.Must(t, c.Get(ctx, client.ObjectKey{Namespace: restartNS, Name: name}, d))
		if v := d.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration]; v != "" {
			t.Errorf("%s was restarted under the halt: %s", name, v)
		}
	}

	// The fix, then a new digest: restarts start again, the canary first.
	d := &appsv1.Deployment{}
	kit.Must(t, c.Get(ctx, client.ObjectKey{Namespace: restartNS, Name: "canary"}, d))
	base := client.MergeFrom(d.DeepCopy())
	d.Spec.MinReadySeconds = 0
	kit.Must(t, c.Patch(ctx, d, base))
	// Paused first (spec.paused): the new target's restarts wait; unpaused, they run.
	setPaused := func(v bool) {
		t.Helper()
		cur := getRI(t, c, "python")
		base := client.MergeFrom(cur.DeepCopy())
		cur.Spec.Paused = v
		kit.Must(t, c.Patch(ctx, cur, base))
	}
	setPaused(true)
	w.rotate(t, 3, 3)
	kit.Eventually(t, time.Minute, "every restart held by the pause", func() (bool, string) {
		w.reportState(t, 3, epoch, vocab.StateReady)
		got := getRI(t, c, "python").Status.Rotation.Restarts
		for _, r := range got {
			if r.Outcome != restarts.OutcomePending || r.Reason != string(vocab.ReasonRotationPaused) {
				return false, fmt.Sprintf("%+v", got)
			}
		}
		return len(got) == 3, fmt.Sprintf("%+v", got)
	})
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

// A pod of the restarted template crash-looping fails the restart within seconds, long
// before its progress deadline (here 10 minutes): the kubelet's status is all it takes;
// the failure then rolls the runtime back.
func TestRotationRestartFailsOnACrashLoop(t *testing.T) {
	w := startRestartWorld(t, 1, 10*time.Minute, "--rotation-restart-max-failures=0")
	ctx, c := context.Background(), w.cp.Client
	epoch := w.approve(t)
	web := restartDeployment("web", true)
	web.Spec.MinReadySeconds = 3600 // the rollout never finishes on its own
	web.Spec.ProgressDeadlineSeconds = ptr.To[int32](7200)
	kit.Must(t, c.Create(ctx, web))
	w.waitRunning(t, 2)
	w.report(t, 1, epoch)
	w.rotate(t, 2, 2)
	w.follow(t, func() { w.reportState(t, 2, epoch, vocab.StateReady) }, "Deployment/web=InProgress")

	// A pod of the new template crash-loops, as the kubelet would report it.
	var crashed string
	kit.Eventually(t, time.Minute, "a pod of the restarted template crash-looping", func() (bool, string) {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(restartNS), client.MatchingLabels{"app": "web"}); err != nil {
			return false, err.Error()
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Annotations[vocab.AnnotationRotatedToGeneration] == "" || p.Status.Phase != corev1.PodRunning {
				continue
			}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", RestartCount: 3, Image: p.Spec.Containers[0].Image,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}
			if err := c.Status().Update(ctx, p); err != nil {
				return false, err.Error()
			}
			crashed = p.Name
			return true, ""
		}
		return false, fmt.Sprintf("%d pods, none of the new template running", len(pods.Items))
	})
	// The restart fails at once (PodsFailing); with a budget of 0 that halts the restarts,
	// and spec.onFailure (RollBack by default) rolls back in the same breath: generation 3
	// serves digest 1 again, its message keeps how the restart failed, every node is allowed
	// it at once, and the workload restarted onto generation 2 is restarted back onto it.
	start := time.Now()
	kit.Eventually(t, time.Minute, "the restart failed and the runtime rolled back", func() (bool, string) {
		w.reportState(t, 2, epoch, vocab.StateReady)
		got := getRI(t, c, "python")
		rb := got.Status.RollbackInEffect()
		return rb != nil && got.Status.Generation == 3 && got.Status.Digest == kit.DigestN(1) && rb.Bad.Generation == 2 && rb.To.Generation == 1 &&
				meta.IsStatusConditionTrue(got.Status.Conditions, string(vocab.ConditionRolledBack)) &&
				strings.Contains(rb.Message, "("+restarts.ReasonPodsFailing+")") && strings.Contains(rb.Message, crashed) && strings.Contains(rb.Message, "crash-looping"),
			fmt.Sprintf("%+v", got.Status)
	})
	t.Logf("the crash loop rolled the runtime back %s after the kubelet reported it", time.Since(start).Round(time.Second))
	expectEvent(t, c, "python", vocab.ReasonRolledBack, corev1.EventTypeWarning)
	w.follow(t, func() { w.reportState(t, 3, epoch, vocab.StateReady) }, "Deployment/web=InProgress")
	d := &appsv1.Deployment{}
	kit.Must(t, c.Get(ctx, client.ObjectKey{Namespace: restartNS, Name: "web"}, d))
	if b, ok := restarts.ParseBarrier(d.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration]); !ok || b.Generation != 3 {
		t.Fatalf("the workload was not restarted back onto the rollback generation: barrier %+v", b)
	}
}

// Containers the operator did not restart (a scale-up, a rescheduled pod) that fail to start
// on the new generation count too: the agents report them (NodeRuntime
// status.failedStarts), one node's report alone does not fail the target for the fleet
// (rollout.maxFailures, 1 by default, counts nodes), and a second node's rolls it back
// with reason FailedStarts, no restart involved.
func TestFailedStartsOnTwoNodesRollBack(t *testing.T) {
	w := startRestartWorld(t, 1, 10*time.Minute)
	c := w.cp.Client
	epoch := w.approve(t)
	w.report(t, 1, epoch)
	w.rotate(t, 2, 2)
	w.reportState(t, 2, epoch, vocab.StateReady)
	failed := func(pod string) brewletv1.NodeFailedStart {
		return brewletv1.NodeFailedStart{PodNamespace: restartNS, PodName: pod, PodUID: types.UID("uid-" + pod), ContainerName: "app",
			ID: w.id, Epoch: types.UID(epoch), Generation: 2, ExitCode: 1, ExitedAt: metav1.NewTime(time.Now().Truncate(time.Second))}
	}
	w.failedStarts = map[string][]brewletv1.NodeFailedStart{w.nodes[0]: {failed("web-scaled-1"),
		// A pod that failed on generation 1 as well is its own problem, not the rotation's.
		failed("broken-1"), {PodNamespace: restartNS, PodName: "broken-1", PodUID: "uid-broken-1", ContainerName: "app",
			ID: w.id, Epoch: types.UID(epoch), Generation: 1, ExitCode: 2, ExitedAt: metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))}}}
	kit.Eventually(t, time.Minute, "one node's failed start counted, within the budget", func() (bool, string) {
		w.reportState(t, 2, epoch, vocab.StateReady)
		got := getRI(t, c, "python")
		f := got.Status.Rotation.FailedStarts
		return got.Status.Generation == 2 && f != nil && f.Nodes == 1 && f.Pods == 1 && !f.Exceeded &&
			strings.Contains(f.Message, "web-scaled-1") && !strings.Contains(f.Message, "broken-1"), fmt.Sprintf("%+v", got.Status)
	})
	if got := getRI(t, c, "python"); got.Status.Generation != 2 || got.Status.RolledBack != nil {
		t.Fatalf("one node's report rolled the fleet back: %+v", got.Status)
	}
	w.failedStarts[w.nodes[1]] = []brewletv1.NodeFailedStart{failed("web-scaled-2")}
	kit.Eventually(t, time.Minute, "the second node's failed start rolled the runtime back", func() (bool, string) {
		w.reportState(t, 2, epoch, vocab.StateReady)
		got := getRI(t, c, "python")
		rb := got.Status.RollbackInEffect()
		return rb != nil && got.Status.Generation == 3 && got.Status.Digest == kit.DigestN(1) && rb.Bad.Generation == 2 &&
			rb.Reason == string(vocab.ReasonFailedStarts) && strings.Contains(rb.Message, "web-scaled-2") &&
			meta.IsStatusConditionTrue(got.Status.Conditions, string(vocab.ConditionRolledBack)), fmt.Sprintf("%+v", got.Status)
	})
	expectEvent(t, c, "python", vocab.ReasonFailedStarts, corev1.EventTypeWarning)
	expectEvent(t, c, "python", vocab.ReasonRolledBack, corev1.EventTypeWarning)
}
