package controlplane

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/kit"
)

// A node that fails the new generation within rollout.maxFailures is excluded, not waited
// for: the rotation completes without it (RotationComplete=True, CompleteWithExclusions),
// workloads on the other nodes are restarted, and a workload with a pod on the excluded
// node is deferred with the node named (restarting it would not move that pod).
func TestRotationRestartsAroundAnExcludedNode(t *testing.T) {
	w := startRestartWorld(t, 2, 10*time.Minute)
	c := w.cp.Client
	epoch := types.UID(w.approve(t))
	healthy, excluded := w.nodes[0], w.nodes[1]
	w.pinned(t, map[string]string{"on-healthy": healthy, "on-excluded": excluded})
	w.waitRunning(t, 4)
	w.report(t, 1, string(epoch))
	w.rotate(t, 2, 2)
	// The healthy node serves generation 2; the other refused its content and keeps
	// serving generation 1 (one failure: within the default budget of 1).
	report := func() {
		w.reportEntries(t, func(node string) brewletv1.NodeRuntimeEntry {
			if node == excluded {
				return brewletv1.NodeRuntimeEntry{ID: w.id, Epoch: epoch, Generation: 1, FailedGeneration: 2,
					State: string(vocab.StateReady), Reason: string(vocab.ReasonLayerPathViolation)}
			}
			return brewletv1.NodeRuntimeEntry{ID: w.id, Epoch: epoch, Generation: 2, State: string(vocab.StateReady)}
		})
	}
	w.follow(t, report, "Deployment/on-excluded=Deferred Deployment/on-healthy=Succeeded")
	got := getRI(t, c, "python")
	comp := meta.FindStatusCondition(got.Status.Conditions, string(vocab.ConditionRotationComplete))
	if comp == nil || comp.Status != "True" || comp.Reason != string(vocab.ReasonCompleteWithExclusions) || !strings.Contains(comp.Message, excluded) {
		t.Errorf("RotationComplete %+v, want True/CompleteWithExclusions naming %s", comp, excluded)
	}
	if n := got.Status.Rotation.Nodes; n.Current != 1 || n.Failed != 1 || n.Excluded != 1 {
		t.Errorf("node counts %+v", n)
	}
	if rc := got.Status.Rotation.RestartCounts; rc == nil || rc.Succeeded != 1 || rc.Deferred != 1 {
		t.Errorf("restart counts %+v", rc)
	}
	for _, r := range got.Status.Rotation.Restarts {
		if r.Name == "on-excluded" && (!strings.Contains(r.Message, excluded) || !strings.Contains(r.Message, string(vocab.ReasonLayerPathViolation))) {
			t.Errorf("the deferral does not name the excluded node and why: %q", r.Message)
		}
	}
}

// A node whose agent dies mid-rotation holds nothing back: once its heartbeat is stale it
// is excluded (AgentNotReporting, an event), the rotation completes without it, and the
// workload with a pod there is restarted too (a stale report means restart, to be safe)
// rather than deferred. When the agent comes back and reports generation 2, the node
// rejoins as current.
func TestRotationRestartsAroundADeadNode(t *testing.T) {
	w := startRestartWorld(t, 2, 10*time.Minute, "--node-stale-after=10s")
	c := w.cp.Client
	epoch := w.approve(t)
	healthy, dead := w.nodes[0], w.nodes[1]
	w.pinned(t, map[string]string{"on-healthy": healthy, "on-dead": dead})
	w.waitRunning(t, 4)
	w.report(t, 1, epoch)
	w.rotate(t, 2, 2)
	// The dead node's last report says generation 1 is Ready; then its agent stops.
	w.dead = map[string]bool{dead: true}
	report := func() { w.reportState(t, 2, epoch, vocab.StateReady) }
	w.follow(t, report, "Deployment/on-dead=Succeeded Deployment/on-healthy=Succeeded")
	got := getRI(t, c, "python")
	comp := meta.FindStatusCondition(got.Status.Conditions, string(vocab.ConditionRotationComplete))
	if comp == nil || comp.Status != "True" || comp.Reason != string(vocab.ReasonCompleteWithExclusions) || !strings.Contains(comp.Message, dead) {
		t.Errorf("RotationComplete %+v, want True/CompleteWithExclusions naming %s", comp, dead)
	}
	r := got.Status.Rotation
	if r.Nodes.Current != 1 || r.Nodes.Stuck != 1 || r.Nodes.Failed != 0 || len(r.ExcludedNodes) != 1 ||
		r.ExcludedNodes[0].Name != dead || r.ExcludedNodes[0].Reason != string(vocab.ReasonAgentNotReporting) {
		t.Errorf("rotation %+v, want %s excluded as AgentNotReporting", r, dead)
	}
	expectEvent(t, c, "python", vocab.ReasonAgentNotReporting, corev1.EventTypeWarning)

	// The agent comes back and reports generation 2: the node rejoins.
	w.dead = nil
	kit.Eventually(t, time.Minute, "the node rejoins as current", func() (bool, string) {
		report()
		r := getRI(t, c, "python").Status.Rotation
		return r.Nodes.Current == 2 && r.Nodes.Excluded == 0 && r.RotationCompletedAt != nil, fmt.Sprintf("%+v", r.Nodes)
	})
}
