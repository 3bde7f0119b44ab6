package restarts

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

func podIn(phase corev1.PodPhase, ready corev1.ConditionStatus, since time.Time, cs ...corev1.ContainerStatus) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", UID: "u1"},
		Status: corev1.PodStatus{Phase: phase, ContainerStatuses: cs,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.NewTime(since), Message: "probe"}}}}
}

func TestPodFailing(t *testing.T) {
	crash := corev1.ContainerStatus{Name: "app", RestartCount: 4, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}}}
	exited := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}
	restarted := corev1.ContainerStatus{Name: "app", RestartCount: 1, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}}
	clean := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}
	healthy := corev1.ContainerStatus{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	deleting := podIn(corev1.PodRunning, corev1.ConditionTrue, now, crash)
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string // a substring; "" for healthy
	}{
		{"running and ready", podIn(corev1.PodRunning, corev1.ConditionTrue, now.Add(-time.Hour), healthy), ""},
		{"crash-looping", podIn(corev1.PodRunning, corev1.ConditionFalse, now, crash), "crash-looping (4 restarts)"},
		{"exited with an error", podIn(corev1.PodRunning, corev1.ConditionFalse, now, exited), "exited with code 1"},
		{"restarted after an error", podIn(corev1.PodRunning, corev1.ConditionTrue, now, restarted), "exited with code 137 (Error) and was restarted 1 time"},
		{"exited cleanly", podIn(corev1.PodSucceeded, corev1.ConditionFalse, now.Add(-time.Hour), clean), ""},
		{"the pod failed", func() *corev1.Pod {
			p := podIn(corev1.PodFailed, corev1.ConditionFalse, now)
			p.Status.Reason = "Evicted"
			return p
		}(), "failed (Evicted)"},
		{"unready within the grace", podIn(corev1.PodRunning, corev1.ConditionFalse, now.Add(-ReadinessGrace+time.Second), healthy), ""},
		{"unready past the grace", podIn(corev1.PodRunning, corev1.ConditionFalse, now.Add(-ReadinessGrace-time.Minute), healthy), "has not been ready for 4m0s"},
		{"pending is not judged", podIn(corev1.PodPending, corev1.ConditionFalse, now.Add(-time.Hour)), ""},
		{"a pod being deleted is not judged", deleting, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := podFailing(c.pod, now)
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Fatalf("podFailing = %q, want %q", got, c.want)
			}
			// The cache keeps only a stripped status: it must say the same.
			stripped, err := StripPod(c.pod)
			if err != nil {
				t.Fatal(err)
			}
			if s := podFailing(stripped.(*corev1.Pod), now); s != got {
				t.Fatalf("stripped pod says %q, the full one %q", s, got)
			}
		})
	}
}

// A failing pod of the restarted template fails the restart at once, long before the
// progress deadline; a failing pod of the old template does not.
func TestDecideFailingPods(t *testing.T) {
	started := &metav1.Time{Time: now.Add(-30 * time.Second)}
	mine := barrier(3, epoch)
	inProgress := []brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "ns", Name: "a", Outcome: OutcomeInProgress, StartedAt: started}}
	for _, c := range []struct {
		name   string
		pod    Pod
		want   string
		reason string
	}{
		{"a new pod crash-looping", Pod{Name: "web-2", UID: "p2", Node: "n", Barrier: mine, Failing: "container app is crash-looping (2 restarts)"}, OutcomeFailed, ReasonPodsFailing},
		{"an old pod crash-looping", Pod{Name: "web-1", UID: "p1", Node: "n", Barrier: barrier(2, epoch), Failing: "container app is crash-looping (2 restarts)"}, OutcomeInProgress, ""},
		{"a new pod healthy", Pod{Name: "web-2", UID: "p2", Node: "n", Barrier: mine}, OutcomeInProgress, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := wl("a", c.pod)
			w.Barrier = mine
			actions := Decide(target, []Workload{w}, Tasks{}, inProgress, 0, policy, now)
			if len(actions) != 1 || actions[0].Record.Outcome != c.want || actions[0].Record.Reason != c.reason {
				t.Fatalf("actions %+v", actions)
			}
			if c.want == OutcomeFailed && !strings.Contains(actions[0].Record.Message, "pod ns/web-2 container app is crash-looping") {
				t.Fatalf("message %q", actions[0].Record.Message)
			}
		})
	}
}

// A container starting to crash wakes a pass; readiness alone does not (the pass that runs
// every 15 s during restarts judges it against the grace).
func TestPodChangedWakesOnFailures(t *testing.T) {
	base := podIn(corev1.PodRunning, corev1.ConditionTrue, now, corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	base.Annotations = map[string]string{vocab.AnnotationRuntimeImage: "python"}
	crashing := base.DeepCopy()
	crashing.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	unready := base.DeepCopy()
	unready.Status.Conditions[0].Status = corev1.ConditionFalse
	if !podChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: crashing}) {
		t.Error("a crash loop does not wake a pass")
	}
	if podChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: unready}) {
		t.Error("a readiness flip wakes a pass")
	}
}
