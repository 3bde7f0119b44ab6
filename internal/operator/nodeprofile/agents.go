package nodeprofile

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/eventnote"
	"brewlet.sh/brewlet/internal/vocab"
)

// maxAgentProblems bounds status.nodesWithoutAgent (the count is exact).
const maxAgentProblems = 20

// maxProblemMessage bounds one problem's message: a kubelet's error can be long.
const maxProblemMessage = 1000

// AgentFacts is what the cluster knows about the agents of a profile's assigned nodes.
type AgentFacts struct {
	// Fresh reports whether a node's agent renewed its Lease recently.
	Fresh func(node string) bool
	// Silent reports whether a node's agent is known to have stopped (nil: none is): such
	// a node is excluded from waves (rollout.PhaseStuck).
	Silent func(node string) bool
	// LastBeat is a node's last renewal on the operator's clock, if one was seen.
	LastBeat func(node string) (time.Time, bool)
	// Pods reads the agents' pods (the DaemonSet's); called only when some node is not
	// fresh, so a healthy fleet costs no read.
	Pods func() ([]corev1.Pod, error)
}

// AgentProblems names the assigned nodes whose agent does not run and report, sorted, with
// the reason the cluster shows: no pod there, a pod pending, a container waiting (its
// reason and message from the kubelet), or a running pod whose heartbeat stopped.
func AgentProblems(assigned []string, f AgentFacts) []brewletv1.NodeAgentProblem {
	stale := slices.DeleteFunc(slices.Clone(assigned), f.Fresh)
	if len(stale) == 0 {
		return nil
	}
	var pods []corev1.Pod
	var podsErr error
	if f.Pods != nil {
		pods, podsErr = f.Pods()
	}
	byNode := map[string]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		if old, ok := byNode[p.Spec.NodeName]; !ok || p.CreationTimestamp.After(old.CreationTimestamp.Time) {
			byNode[p.Spec.NodeName] = p // the newest pod of a node is the DaemonSet's current one
		}
	}
	var out []brewletv1.NodeAgentProblem
	for _, node := range stale {
		pr := agentProblem(node, byNode[node], f.LastBeat)
		if podsErr != nil {
			pr.Reason = string(vocab.ReasonAgentNotReporting)
			pr.Message = fmt.Sprintf("the agent of node %s does not renew its Lease brewlet-provisioner-%s, and its pod could not be read: %v", node, node, podsErr)
		}
		pr.Message = eventnote.Cut(pr.Message, maxProblemMessage)
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b brewletv1.NodeAgentProblem) int { return strings.Compare(a.NodeName, b.NodeName) })
	return out
}

func agentProblem(node string, pod *corev1.Pod, lastBeat func(string) (time.Time, bool)) brewletv1.NodeAgentProblem {
	pr := brewletv1.NodeAgentProblem{NodeName: node}
	var beat time.Time
	beaten := false
	if lastBeat != nil {
		beat, beaten = lastBeat(node)
	}
	heard := "its agent never renewed its Lease brewlet-provisioner-" + node
	if beaten {
		heard = fmt.Sprintf("its agent last renewed its Lease at %s", beat.UTC().Format(time.RFC3339))
		t := metav1.NewTime(beat)
		pr.Since = &t
	} else if pod != nil {
		t := pod.CreationTimestamp
		pr.Since = &t
	}
	if pod == nil {
		pr.Reason = string(vocab.ReasonAgentPodMissing)
		pr.Message = fmt.Sprintf("no brewlet-provisioner pod runs on node %s and %s: the DaemonSet does not schedule there (check provisioner.pools and the node's taints; kubectl describe daemonset brewlet-provisioner)", node, heard)
		return pr
	}
	if w := waiting(pod); w != nil {
		pr.Reason = string(vocab.ReasonAgentContainerFailing)
		pr.Message = fmt.Sprintf("agent pod %s: container %s is waiting: %s", pod.Name, w.name, w.reason)
		if w.message != "" {
			pr.Message += ": " + w.message
		}
		if w.restarts > 0 {
			pr.Message += fmt.Sprintf(" (restarted %d times%s)", w.restarts, w.last)
		}
		pr.Message += "; " + heard + hint(w.message)
		return pr
	}
	if pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "" {
		pr.Reason = string(vocab.ReasonAgentPodPending)
		pr.Message = fmt.Sprintf("agent pod %s is pending", pod.Name)
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				pr.Message += fmt.Sprintf(" (not scheduled: %s %s)", c.Reason, c.Message)
			}
		}
		pr.Message += "; " + heard
		return pr
	}
	pr.Reason = string(vocab.ReasonAgentNotReporting)
	pr.Message = fmt.Sprintf("agent pod %s is %s but %s: see its log (kubectl logs %s)", pod.Name, pod.Status.Phase, heard, pod.Name)
	return pr
}

type waitingContainer struct {
	name, reason, message, last string
	restarts                    int32
}

// waiting is the first container (init containers first) the kubelet keeps waiting for
// a reason other than starting normally.
func waiting(pod *corev1.Pod) *waitingContainer {
	for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		w := cs.State.Waiting
		if w == nil || w.Reason == "" || w.Reason == "ContainerCreating" || w.Reason == "PodInitializing" {
			continue
		}
		out := &waitingContainer{name: cs.Name, reason: w.Reason, message: w.Message, restarts: cs.RestartCount}
		if t := cs.LastTerminationState.Terminated; t != nil {
			out.last = fmt.Sprintf(", last exit code %d", t.ExitCode)
			if t.Message != "" {
				out.last += ": " + t.Message
			}
		}
		return out
	}
	return nil
}

// hint names the chart value that fixes a failure the kubelet reports in a known form.
func hint(msg string) string {
	if strings.Contains(msg, "not a shared or slave mount") {
		return ". The node's root mount is private: set provisioner.containerd.hostRootPropagation=None (docs/install.md, \"Nodes whose root mount is private\")"
	}
	return ""
}
