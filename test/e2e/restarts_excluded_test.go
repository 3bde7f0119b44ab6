package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/restarts"
	"brewlet.sh/brewlet/internal/vocab"
)

// A node that fails the new generation within rollout.maxFailures is excluded, not waited
// for: the rotation completes without it (RotationComplete=True, CompleteWithExclusions),
// workloads on the other nodes are restarted, and a workload with a pod on the excluded
// node is deferred with the node named (restarting it would not move that pod).
func TestRotationRestartsAroundAnExcludedNode(t *testing.T) {
	w := startRestartWorld(t, 2, 10*time.Minute)
	ctx, c := context.Background(), w.cp.Client
	must(t, c.Create(ctx, runtimeImage("python", "127.0.0.1:5000/runtimes/python@"+digestN(1))))
	eventually(t, 30*time.Second, "generation 1", func() (bool, string) {
		got := getRI(t, c, "python")
		return got.Status.Generation == 1, fmt.Sprintf("%+v", got.Status)
	})
	epoch := getRI(t, c, "python").UID
	w.podGen = func(p *corev1.Pod) int64 {
		if b, ok := restarts.ParseBarrier(p.Annotations[vocab.AnnotationRotatedToGeneration]); ok {
			return b.Generation
		}
		return 1
	}
	healthy, excluded := w.nodes[0], w.nodes[1]
	for name, node := range map[string]string{"on-healthy": healthy, "on-excluded": excluded} {
		d := restartDeployment(name, true)
		d.Spec.Template.Spec.NodeName = node
		must(t, c.Create(ctx, d))
	}
	w.waitRunning(t, 4)
	w.report(t, 1, string(epoch))

	cur := getRI(t, c, "python")
	base := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Source.Image = "127.0.0.1:5000/runtimes/python@" + digestN(2)
	must(t, c.Patch(ctx, cur, base))
	eventually(t, 30*time.Second, "generation 2", func() (bool, string) {
		got := getRI(t, c, "python")
		return got.Status.Generation == 2, fmt.Sprintf("%+v", got.Status)
	})
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
	want := "Deployment/on-excluded=Deferred Deployment/on-healthy=Succeeded"
	last := ""
	eventually(t, 3*time.Minute, want, func() (bool, string) {
		report()
		got := getRI(t, c, "python")
		if o := restartOutcomes(got); o != last {
			t.Logf("restarts: %s", o)
			last = o
		}
		return restartOutcomes(got) == want, restartOutcomes(got)
	})
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
	ctx, c := context.Background(), w.cp.Client
	must(t, c.Create(ctx, runtimeImage("python", "127.0.0.1:5000/runtimes/python@"+digestN(1))))
	eventually(t, 30*time.Second, "generation 1", func() (bool, string) {
		got := getRI(t, c, "python")
		return got.Status.Generation == 1, fmt.Sprintf("%+v", got.Status)
	})
	epoch := getRI(t, c, "python").UID
	w.podGen = func(p *corev1.Pod) int64 {
		if b, ok := restarts.ParseBarrier(p.Annotations[vocab.AnnotationRotatedToGeneration]); ok {
			return b.Generation
		}
		return 1
	}
	healthy, dead := w.nodes[0], w.nodes[1]
	for name, node := range map[string]string{"on-healthy": healthy, "on-dead": dead} {
		d := restartDeployment(name, true)
		d.Spec.Template.Spec.NodeName = node
		must(t, c.Create(ctx, d))
	}
	w.waitRunning(t, 4)
	w.report(t, 1, string(epoch))

	cur := getRI(t, c, "python")
	base := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Source.Image = "127.0.0.1:5000/runtimes/python@" + digestN(2)
	must(t, c.Patch(ctx, cur, base))
	eventually(t, 30*time.Second, "generation 2", func() (bool, string) {
		got := getRI(t, c, "python")
		return got.Status.Generation == 2, fmt.Sprintf("%+v", got.Status)
	})
	// The dead node's last report says generation 1 is Ready; then its agent stops.
	w.dead = map[string]bool{dead: true}
	report := func() { w.reportState(t, 2, string(epoch), vocab.StateReady) }
	want := "Deployment/on-dead=Succeeded Deployment/on-healthy=Succeeded"
	last := ""
	eventually(t, 3*time.Minute, want, func() (bool, string) {
		report()
		got := getRI(t, c, "python")
		if o := restartOutcomes(got); o != last {
			t.Logf("restarts: %s", o)
			last = o
		}
		return restartOutcomes(got) == want, restartOutcomes(got)
	})
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
	eventually(t, time.Minute, "the node rejoins as current", func() (bool, string) {
		report()
		r := getRI(t, c, "python").Status.Rotation
		return r.Nodes.Current == 2 && r.Nodes.Excluded == 0 && r.RotationCompletedAt != nil, fmt.Sprintf("%+v", r.Nodes)
	})
}
