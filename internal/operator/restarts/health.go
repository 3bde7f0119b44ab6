package restarts

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ReasonPodsFailing: a pod of the restarted template crash-loops, exited with an error or
// stayed unready past the readiness grace, so the restart failed without waiting for the
// progress deadline.
const ReasonPodsFailing = "PodsFailing"

// ReadinessGrace is how long a running pod of a restarted template may stay unready before
// the restart counts as failed: short against the progress deadline, long enough for a
// runtime's first start (a JVM's, a cold interpreter's).
const ReadinessGrace = 3 * time.Minute

// failingPod names the first pod of w's template for t that fails, with how ("": none).
// Only pods made from the restarted template count: a pod of the old one failing says
// nothing about the new generation.
func failingPod(w Workload, t Target) string {
	for _, p := range w.Pods {
		if p.Failing == "" {
			continue
		}
		if b, ok := ParseBarrier(p.Barrier); !ok || b.ID != t.ID || b.Epoch != t.Epoch || b.Generation < t.Generation {
			continue
		}
		return fmt.Sprintf("pod %s/%s %s", w.Namespace, p.Name, p.Failing)
	}
	return ""
}

// podFailing reads how a pod fails from its status at now ("": it does not).
func podFailing(p *corev1.Pod, now time.Time) string {
	if p.DeletionTimestamp != nil {
		return ""
	}
	if p.Status.Phase == corev1.PodFailed {
		return "failed (" + p.Status.Reason + ")"
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			return fmt.Sprintf("container %s is crash-looping (%d restarts)", c.Name, c.RestartCount)
		}
		if t := c.State.Terminated; t != nil && t.ExitCode != 0 {
			return fmt.Sprintf("container %s exited with code %d (%s)", c.Name, t.ExitCode, t.Reason)
		}
		if t := c.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 && c.RestartCount > 0 {
			return fmt.Sprintf("container %s exited with code %d (%s) and was restarted %d time(s)", c.Name, t.ExitCode, t.Reason, c.RestartCount)
		}
	}
	if p.Status.Phase != corev1.PodRunning {
		return ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue && !c.LastTransitionTime.IsZero() && now.Sub(c.LastTransitionTime.Time) > ReadinessGrace {
			return fmt.Sprintf("has not been ready for %s", now.Sub(c.LastTransitionTime.Time).Round(time.Second))
		}
	}
	return ""
}

// stripStatus keeps of a pod's status what podFailing reads.
func stripStatus(s corev1.PodStatus) corev1.PodStatus {
	out := corev1.PodStatus{Phase: s.Phase, Reason: s.Reason}
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady {
			out.Conditions = append(out.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime})
		}
	}
	for _, c := range s.ContainerStatuses {
		k := corev1.ContainerStatus{Name: c.Name, RestartCount: c.RestartCount}
		if w := c.State.Waiting; w != nil {
			k.State.Waiting = &corev1.ContainerStateWaiting{Reason: w.Reason}
		}
		if t := c.State.Terminated; t != nil {
			k.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: t.ExitCode, Reason: t.Reason}
		}
		if t := c.LastTerminationState.Terminated; t != nil {
			k.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: t.ExitCode, Reason: t.Reason}
		}
		out.ContainerStatuses = append(out.ContainerStatuses, k)
	}
	return out
}
