package nodeprofile

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

func agentPod(name, node string, created time.Time, edit func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if edit != nil {
		edit(&p)
	}
	return p
}

func waitingIn(reason, msg string, restarts int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "provisioner", RestartCount: restarts,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	}
}

func TestAgentProblems(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	beats := map[string]time.Time{"fresh": t0, "went-quiet": t0.Add(-time.Hour)}
	facts := func(pods ...corev1.Pod) AgentFacts {
		return AgentFacts{
			Fresh:    func(n string) bool { return n == "fresh" },
			LastBeat: func(n string) (time.Time, bool) { b, ok := beats[n]; return b, ok },
			Pods:     func() ([]corev1.Pod, error) { return pods, nil },
		}
	}
	private := `failed to generate container "x" spec: failed to generate spec: path "/" is mounted on "/" but it is not a shared or slave mount`
	cases := []struct {
		name   string
		nodes  []string
		facts  AgentFacts
		reason vocab.Reason // of the first problem; "" = none
		want   []string     // substrings of its message
	}{
		{"every agent fresh", []string{"fresh"}, facts(), "", nil},
		{"no pod on the node", []string{"n1"}, facts(agentPod("p0", "other", t0, nil)), vocab.ReasonAgentPodMissing,
			[]string{"no brewlet-provisioner pod runs on node n1", "never renewed", "provisioner.pools"}},
		{"root mount private", []string{"n1"}, facts(agentPod("p1", "n1", t0, waitingIn("CreateContainerError", private, 0))), vocab.ReasonAgentContainerFailing,
			[]string{"p1", "CreateContainerError", "not a shared or slave mount", "hostRootPropagation=None"}},
		{"crash looping", []string{"went-quiet"}, facts(agentPod("p2", "went-quiet", t0, func(p *corev1.Pod) {
			waitingIn("CrashLoopBackOff", "back-off 5m0s restarting failed container", 7)(p)
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 2, Message: "cannot reach containerd"}
		})), vocab.ReasonAgentContainerFailing, []string{"CrashLoopBackOff", "restarted 7 times, last exit code 2: cannot reach containerd", "last renewed its Lease at 2026-12-02T11:00:00Z"}},
		{"image pull in an init container", []string{"n1"}, facts(agentPod("p3", "n1", t0, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "install-shim",
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "pull access denied"}}}}
		})), vocab.ReasonAgentContainerFailing, []string{"install-shim", "ImagePullBackOff: pull access denied"}},
		{"unschedulable", []string{"n1"}, facts(agentPod("p4", "n1", t0, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes: insufficient memory"}}
		})), vocab.ReasonAgentPodPending, []string{"p4 is pending", "insufficient memory"}},
		{"still creating", []string{"n1"}, facts(agentPod("p5", "n1", t0, waitingIn("ContainerCreating", "", 0))), vocab.ReasonAgentPodPending, []string{"p5 is pending"}},
		{"running but silent", []string{"went-quiet"}, facts(agentPod("p6", "went-quiet", t0, nil)), vocab.ReasonAgentNotReporting,
			[]string{"p6 is Running", "kubectl logs p6"}},
		{"the newest pod of a node counts", []string{"n1"}, facts(
			agentPod("old", "n1", t0.Add(-time.Hour), waitingIn("CrashLoopBackOff", "", 3)),
			agentPod("new", "n1", t0, nil)), vocab.ReasonAgentNotReporting, []string{"new is Running"}},
		{"a terminating pod does not count", []string{"n1"}, facts(agentPod("gone", "n1", t0, func(p *corev1.Pod) {
			now := metav1.NewTime(t0)
			p.DeletionTimestamp = &now
		})), vocab.ReasonAgentPodMissing, nil},
		{"pods unreadable", []string{"n1"}, AgentFacts{Fresh: func(string) bool { return false },
			Pods: func() ([]corev1.Pod, error) { return nil, errors.New("pods is forbidden") }}, vocab.ReasonAgentNotReporting, []string{"could not be read: pods is forbidden"}},
		{"a long kubelet message is cut", []string{"n1"}, facts(agentPod("p7", "n1", t0, waitingIn("CreateContainerError", strings.Repeat("x", 5000), 0))),
			vocab.ReasonAgentContainerFailing, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := AgentProblems(tc.nodes, tc.facts)
			if tc.reason == "" {
				if len(got) != 0 {
					t.Fatalf("problems %+v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].Reason != string(tc.reason) || got[0].NodeName != tc.nodes[0] {
				t.Fatalf("got %+v, want one %s for %s", got, tc.reason, tc.nodes[0])
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0].Message, w) {
					t.Errorf("message %q lacks %q", got[0].Message, w)
				}
			}
			if n := len([]rune(got[0].Message)); n > 1024 { // the CRD's maxLength
				t.Errorf("message of %d characters", n)
			}
		})
	}
}

// The pods are read only when some node is stale: a healthy fleet costs no read.
func TestAgentProblemsReadPodsOnlyWhenNeeded(t *testing.T) {
	read := 0
	f := AgentFacts{Fresh: func(string) bool { return true }, Pods: func() ([]corev1.Pod, error) { read++; return nil, nil }}
	if got := AgentProblems([]string{"a", "b"}, f); len(got) != 0 || read != 0 {
		t.Fatalf("problems %v, %d reads", got, read)
	}
	f.Fresh = func(n string) bool { return n == "a" }
	if got := AgentProblems([]string{"b", "a", "c"}, f); len(got) != 2 || got[0].NodeName != "b" || got[1].NodeName != "c" || read != 1 {
		t.Fatalf("problems %v, %d reads", got, read)
	}
}

// A stale node without an agent pod is reported as AgentPodMissing, in the nodes' order.
func TestAgentProblemsWithoutPods(t *testing.T) {
	f := AgentFacts{Fresh: func(string) bool { return false }}
	problems := AgentProblems([]string{"n1", "n2", "n3", "n4", "n5", "n6", "n7"}, f)
	if len(problems) != 7 {
		t.Fatalf("problems %v", problems)
	}
	for i, p := range problems {
		if want := fmt.Sprintf("n%d", i+1); p.NodeName != want || p.Reason != "AgentPodMissing" {
			t.Errorf("problem %d: %+v, want %s AgentPodMissing", i, p, want)
		}
	}
}
