package controlplane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/nodepool"
	"brewlet.sh/brewlet/internal/provisioner/agent"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// TestNodeProfile runs brewlet-operator (in-process, operator.New as main uses it) against
// a real API server; the test plays the node agents by writing NodeRuntime status.
func TestNodeProfile(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	kit.StartOperator(t, cp, false)
	t.Run("pools, conflicts, unknown IDs, NodeRuntime spec and the RuntimeClass", func(t *testing.T) {
		testProfilePools(t, cp.Client)
	})
	t.Run("rotation in waves of maxUnavailable=1 over three nodes", func(t *testing.T) {
		testRotationWaves(t, cp.Client)
	})
	t.Run("a node stuck past rollout.nodeTimeout is excluded, the waves go on, it rejoins", func(t *testing.T) {
		testRotationStuckNode(t, cp.Client)
	})
	t.Run("spec.paused holds the waves and resumes them", func(t *testing.T) {
		testRotationPaused(t, cp.Client)
	})
	t.Run("the fleet pause on RuntimeClass brewlet holds every RuntimeImage's waves", func(t *testing.T) {
		testFleetPaused(t, cp.Client)
	})
	t.Run("nodes without a running agent are named, with the cluster's reason", func(t *testing.T) {
		testAgentsMissing(t, cp.Client)
	})
}

func mkNode(t *testing.T, c client.Client, name string, labels map[string]string) {
	t.Helper()
	if err := c.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
}

func mkProfile(t *testing.T, c client.Client, name, key string, pools []string, mut func(*brewletv1.NodeProfile), ids ...string) {
	t.Helper()
	p := &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: brewletv1.NodeProfileSpec{NodePool: brewletv1.NodePool{Key: key, Names: pools}}}
	for _, id := range ids {
		p.Spec.RuntimeImages = append(p.Spec.RuntimeImages, brewletv1.OfferedRuntime{ID: id})
	}
	if mut != nil {
		mut(p)
	}
	if err := c.Create(context.Background(), p); err != nil {
		t.Fatalf("NodeProfile %s: %v", name, err)
	}
}

func getNP(t *testing.T, c client.Client, name string) *brewletv1.NodeProfile {
	t.Helper()
	p := &brewletv1.NodeProfile{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: name}, p); err != nil {
		t.Fatalf("NodeProfile %s: %v", name, err)
	}
	return p
}

// nrtSpec returns a node's NodeRuntime spec (empty when the object does not exist yet).
func nrtSpec(t *testing.T, c client.Client, node string) brewletv1.NodeRuntimeSpec {
	t.Helper()
	nrt := &brewletv1.NodeRuntime{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: node}, nrt); err != nil {
		if apierrors.IsNotFound(err) {
			return brewletv1.NodeRuntimeSpec{}
		}
		t.Fatalf("NodeRuntime %s: %v", node, err)
	}
	return nrt.Spec
}

func directiveFor(s brewletv1.NodeRuntimeSpec, id string) *brewletv1.RuntimeDirective {
	for i := range s.Runtimes {
		if s.Runtimes[i].ID == id {
			return &s.Runtimes[i]
		}
	}
	return nil
}

func readyCond(p *brewletv1.NodeProfile) string {
	c := meta.FindStatusCondition(p.Status.Conditions, string(vocab.ConditionReady))
	if c == nil || c.ObservedGeneration != p.Generation {
		return "<none>"
	}
	return fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
}

func testProfilePools(t *testing.T, c client.Client) {
	ctx := context.Background()
	const key = "node-restriction.kubernetes.io/pool"
	if err := c.Create(ctx, kit.RuntimeImage("py", "127.0.0.1:5000/runtimes/py@"+kit.DigestN(1))); err != nil {
		t.Fatal(err)
	}
	mkNode(t, c, "gen-1", map[string]string{key: "general"})
	mkNode(t, c, "gen-2", map[string]string{key: "general"})
	mkNode(t, c, "batch-1", map[string]string{key: "batch"})
	mkNode(t, c, "cp-1", map[string]string{key: "general", nodepool.ControlPlaneLabel: ""})
	mkNode(t, c, "other-1", map[string]string{"unrelated": "general"})

	mkProfile(t, c, "general", key, []string{"general"}, func(p *brewletv1.NodeProfile) {
		p.Spec.ContainerdRestart = "none"
	}, "py", "ghost")
	kit.Eventually(t, 30*time.Second, "general assigned gen-1, gen-2 (not the control plane, not other pools)", func() (bool, string) {
		p := getNP(t, c, "general")
		return p.Status.AssignedNodes == 2 && strings.Contains(readyCond(p), string(vocab.ReasonUnknownRuntimeImage)),
			fmt.Sprintf("assigned %d, Ready %s", p.Status.AssignedNodes, readyCond(p))
	})
	// The unknown ID blocks nothing: both IDs are offered, py with its install mode, and
	// containerdRestart is copied from the profile.
	for _, n := range []string{"gen-1", "gen-2"} {
		kit.Eventually(t, 30*time.Second, "NodeRuntime spec of "+n, func() (bool, string) {
			s := nrtSpec(t, c, n)
			d := directiveFor(s, "py")
			return s.ContainerdRestart == "none" && d != nil && d.Install == "Eager" && directiveFor(s, "ghost") != nil, fmt.Sprintf("%+v", s)
		})
		nrt := &brewletv1.NodeRuntime{}
		if err := c.Get(ctx, types.NamespacedName{Name: n}, nrt); err != nil {
			t.Fatal(err)
		}
		node := &corev1.Node{}
		if err := c.Get(ctx, types.NamespacedName{Name: n}, node); err != nil {
			t.Fatal(err)
		}
		if len(nrt.OwnerReferences) != 1 || nrt.OwnerReferences[0].UID != node.UID || nrt.OwnerReferences[0].Kind != "Node" {
			t.Fatalf("NodeRuntime %s owner %+v, want Node %s", n, nrt.OwnerReferences, node.UID)
		}
	}
	// The agent takes its containerd mode from this spec, not from its flag (the flag is
	// only the default for a node no operator wrote to).
	if m := agent.ModeOf(nrtSpec(t, c, "gen-1"), vocab.ContainerdRestartValidated); m != vocab.ContainerdRestartNone {
		t.Fatalf("agent containerd mode %q, want none from the NodeRuntime spec", m)
	}
	if m := agent.ModeOf(nrtSpec(t, c, "other-1"), vocab.ContainerdRestartValidated); m != vocab.ContainerdRestartValidated {
		t.Fatalf("agent containerd mode %q on a node without spec, want the flag's validated", m)
	}
	for _, n := range []string{"cp-1", "batch-1", "other-1"} {
		if s := nrtSpec(t, c, n); len(s.Runtimes) != 0 {
			t.Fatalf("node %s is in no pool of the profile but got spec %+v", n, s)
		}
	}
	rc := &nodev1.RuntimeClass{}
	kit.Eventually(t, 30*time.Second, "RuntimeClass brewlet", func() (bool, string) {
		err := c.Get(ctx, types.NamespacedName{Name: vocab.RuntimeClassName}, rc)
		return err == nil && rc.Handler == vocab.RuntimeClassName && rc.Scheduling != nil &&
			rc.Scheduling.NodeSelector[vocab.LabelRuntime] == vocab.LabelValueReady, fmt.Sprintf("%v %+v", err, rc)
	})

	// The agents report py Ready: the profile counts ready nodes; ghost still keeps it not Ready.
	for _, n := range []string{"gen-1", "gen-2"} {
		report(t, c, n, "py", "Ready", getRI(t, c, "py").Status.Generation)
	}
	kit.Eventually(t, 30*time.Second, "readyNodes 2", func() (bool, string) {
		p := getNP(t, c, "general")
		return p.Status.ReadyNodes == 2, fmt.Sprintf("%+v", p.Status)
	})
	// Removing the unknown ID makes the profile Ready.
	p := getNP(t, c, "general")
	p.Spec.RuntimeImages = p.Spec.RuntimeImages[:1]
	if err := c.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	kit.Eventually(t, 30*time.Second, "general Ready", func() (bool, string) {
		p := getNP(t, c, "general")
		return strings.HasPrefix(readyCond(p), "True/"+string(vocab.ReasonNodesReady)), readyCond(p)
	})

	// A newer profile overlapping general on gen-1 and gen-2 is refused there and keeps
	// its own batch node; the older profile keeps serving.
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has a one-second resolution
	mkProfile(t, c, "newer", key, []string{"general", "batch"}, nil, "py")
	kit.Eventually(t, 30*time.Second, "newer refused with PoolConflict", func() (bool, string) {
		p := getNP(t, c, "newer")
		r := readyCond(p)
		return strings.HasPrefix(r, "False/"+string(vocab.ReasonPoolConflict)) && strings.Contains(r, "general") &&
			strings.Contains(r, "gen-1, gen-2") && p.Status.AssignedNodes == 1, fmt.Sprintf("assigned %d, %s", p.Status.AssignedNodes, r)
	})
	gp := getNP(t, c, "general")
	if gp.Status.AssignedNodes != 2 || !strings.HasPrefix(readyCond(gp), "True/") {
		t.Fatalf("the older profile stopped serving: %+v", gp.Status)
	}
	if s := nrtSpec(t, c, "gen-1"); s.ContainerdRestart != "none" {
		t.Fatalf("the newer profile wrote a shared node's spec: %+v", s)
	}
	kit.Eventually(t, 30*time.Second, "batch-1 spec from newer", func() (bool, string) {
		s := nrtSpec(t, c, "batch-1")
		return s.ContainerdRestart == "validated" && directiveFor(s, "py") != nil, fmt.Sprintf("%+v", s)
	})
	expectEvent(t, c, "newer", vocab.ReasonPoolConflict, corev1.EventTypeWarning)
	// Deleting the older profile hands the shared nodes to the newer one.
	if err := c.Delete(ctx, getNP(t, c, "general")); err != nil {
		t.Fatal(err)
	}
	kit.Eventually(t, 30*time.Second, "newer takes gen-1, gen-2", func() (bool, string) {
		p := getNP(t, c, "newer")
		return p.Status.AssignedNodes == 3 && !strings.Contains(readyCond(p), string(vocab.ReasonPoolConflict)), fmt.Sprintf("assigned %d, %s", p.Status.AssignedNodes, readyCond(p))
	})
	if err := c.Delete(ctx, getNP(t, c, "newer")); err != nil {
		t.Fatal(err)
	}
}

// allowedOf reads the allowed generation of id on each node.
func allowedOf(t *testing.T, c client.Client, id string, nodes ...string) []int64 {
	out := make([]int64, len(nodes))
	for i, n := range nodes {
		if d := directiveFor(nrtSpec(t, c, n), id); d != nil {
			out[i] = d.AllowedGeneration
		}
	}
	return out
}

// report writes what an agent would after acting on its directive.
func report(t *testing.T, c client.Client, node, id, state string, gen int64) {
	t.Helper()
	ri := getRI(t, c, id)
	e := brewletv1.NodeRuntimeEntry{ID: id, Epoch: ri.UID, Generation: gen, State: state, Reason: failReason(state)}
	// The operator writes the same object's spec: like the agent, write again on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		nrt := &brewletv1.NodeRuntime{}
		if err := c.Get(context.Background(), types.NamespacedName{Name: node}, nrt); err != nil {
			return err
		}
		now := metav1.Now()
		nrt.Status = brewletv1.NodeRuntimeStatus{ObservedAt: &now, Complete: true, Runtimes: []brewletv1.NodeRuntimeEntry{e}}
		return c.Status().Update(context.Background(), nrt)
	})
	if err != nil {
		t.Fatalf("NodeRuntime %s status: %v", node, err)
	}
}

func failReason(state string) string {
	if state == string(vocab.StateFailed) {
		return string(vocab.ReasonPrivilegedRuntimeFile)
	}
	return ""
}

func rotateTo(t *testing.T, c client.Client, id string, n int) {
	t.Helper()
	kit.UpdateRI(t, c, id, func(ri *brewletv1.RuntimeImage) {
		ri.Spec.Source.Image = "127.0.0.1:5000/runtimes/" + id + "@" + kit.DigestN(n)
	})
	kit.Eventually(t, 30*time.Second, fmt.Sprintf("%s digest %d assigned a generation", id, n), func() (bool, string) {
		ri := getRI(t, c, id)
		return caughtUp(ri), fmt.Sprintf("%+v", ri.Status)
	})
}

func expectAllowed(t *testing.T, c client.Client, what, id string, nodes []string, want ...int64) {
	t.Helper()
	kit.Eventually(t, 30*time.Second, what, func() (bool, string) {
		got := allowedOf(t, c, id, nodes...)
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("allowed %v, want %v", got, want)
	})
}

// stays checks that the allowed generations do not move for a while (a halted rotation
// must not reach another node).
func stays(t *testing.T, c client.Client, id string, nodes []string, want ...int64) {
	t.Helper()
	for range 20 {
		if got := allowedOf(t, c, id, nodes...); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("allowed moved to %v, want it to stay %v", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testRotationWaves: maxUnavailable=1 over w-a, w-b, w-c. Generation 2 goes node by node
// as each reports Ready. With maxFailures=0, generation 3 halts after the first wave when
// w-a reports Failed: w-b and w-c keep generation 2. Digest 4 resumes from w-a.
func testRotationWaves(t *testing.T, c client.Client) {
	nodes := []string{"w-a", "w-b", "w-c"}
	one, zero := intstr.FromInt32(1), int32(0)
	rolloutPool(t, c, "wave", "rb", &brewletv1.RolloutPolicy{MaxUnavailable: &one, MaxFailures: &zero}, nodes...)
	// Generation 1 is not staged: every node installs it.
	for _, n := range nodes {
		report(t, c, n, "rb", "Ready", 1)
	}
	rotateTo(t, c, "rb", 2)
	expectAllowed(t, c, "wave 1 of generation 2", "rb", nodes, 2, 1, 1)
	stays(t, c, "rb", nodes, 2, 1, 1)
	report(t, c, "w-a", "rb", "Installing", 2)
	stays(t, c, "rb", nodes, 2, 1, 1)
	report(t, c, "w-a", "rb", "Ready", 2)
	expectAllowed(t, c, "wave 2 of generation 2", "rb", nodes, 2, 2, 1)
	report(t, c, "w-b", "rb", "Ready", 2)
	expectAllowed(t, c, "wave 3 of generation 2", "rb", nodes, 2, 2, 2)
	report(t, c, "w-c", "rb", "Ready", 2)
	expectRotation(t, c, "rb", "generation 2 complete", func(ri *brewletv1.RuntimeImage) bool {
		r := ri.Status.Rotation
		return r.Target.Generation == 2 && r.Nodes.Current == 3 && r.RotationCompletedAt != nil &&
			condIs(ri, vocab.ConditionRotationComplete, "True", vocab.ReasonAllNodesCurrent) &&
			condIs(ri, vocab.ConditionRotationProgressing, "False", vocab.ReasonAllNodesCurrent)
	})

	// A digest the nodes refuse: the first wave fails and the rotation halts there.
	rotateTo(t, c, "rb", 3)
	expectAllowed(t, c, "wave 1 of generation 3", "rb", nodes, 3, 2, 2)
	expectRotation(t, c, "rb", "generation 3 progressing", func(ri *brewletv1.RuntimeImage) bool {
		r := ri.Status.Rotation
		return r.Target.Generation == 3 && r.RotationCompletedAt == nil && condIs(ri, vocab.ConditionRotationProgressing, "True", vocab.ReasonRotating)
	})
	report(t, c, "w-a", "rb", "Failed", 3)
	stays(t, c, "rb", nodes, 3, 2, 2)
	expectRotation(t, c, "rb", "generation 3 halted", func(ri *brewletv1.RuntimeImage) bool {
		r := ri.Status.Rotation
		p := meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionRotationProgressing))
		return r.Nodes.Failed == 1 && r.Nodes.Excluded == 1 && len(r.ExcludedNodes) == 1 && r.ExcludedNodes[0].Name == "w-a" &&
			r.ExcludedNodes[0].Reason == string(vocab.ReasonPrivilegedRuntimeFile) && r.ExcludedNodes[0].Generation == 3 &&
			condIs(ri, vocab.ConditionRotationProgressing, "False", vocab.ReasonRotationHalted) &&
			strings.Contains(p.Message, "w-a: "+string(vocab.ReasonPrivilegedRuntimeFile))
	})
	expectEvent(t, c, "rb", vocab.ReasonRotationHalted, corev1.EventTypeWarning)
	// A new digest resumes, from the first node again.
	rotateTo(t, c, "rb", 4)
	expectAllowed(t, c, "wave 1 of generation 4", "rb", nodes, 4, 2, 2)
	report(t, c, "w-a", "rb", "Ready", 4)
	expectAllowed(t, c, "wave 2 of generation 4", "rb", nodes, 4, 4, 2)
}

func condIs(ri *brewletv1.RuntimeImage, typ vocab.ConditionType, status string, reason vocab.Reason) bool {
	c := meta.FindStatusCondition(ri.Status.Conditions, string(typ))
	return c != nil && string(c.Status) == status && c.Reason == string(reason)
}

func expectRotation(t *testing.T, c client.Client, id, what string, ok func(*brewletv1.RuntimeImage) bool) {
	t.Helper()
	kit.Eventually(t, 30*time.Second, what, func() (bool, string) {
		ri := getRI(t, c, id)
		if ri.Status.Rotation == nil {
			return false, "no rotation status"
		}
		return ok(ri), fmt.Sprintf("%+v %+v", ri.Status.Rotation, ri.Status.Conditions)
	})
}

// expectEvent waits for an event with reason and type on the named object.
func expectEvent(t *testing.T, c client.Client, object string, reason vocab.Reason, typ string) {
	t.Helper()
	kit.Eventually(t, 30*time.Second, fmt.Sprintf("%s event %s on %s", typ, reason, object), func() (bool, string) {
		events := &corev1.EventList{}
		if err := c.List(context.Background(), events); err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == object && e.Reason == string(reason) && e.Type == typ {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(events.Items))
	})
}

// agentsAlive renews the nodes' agent Leases every few seconds until the test ends, as
// running agents do (a node without heartbeats is silent: left out of waves and rotations).
func agentsAlive(t *testing.T, c client.Client, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		renewAgentLease(t, c, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, n := range nodes {
				if err := renewLease(ctx, c, n); err != nil && ctx.Err() == nil {
					t.Logf("renew the agent Lease of %s: %v", n, err)
				}
			}
		}
	}()
}

// testRotationStuckNode: maxUnavailable=1, maxFailures=0, nodeTimeout=5s over s-a, s-b,
// s-c. s-a is allowed generation 2 and never finishes: past its installBy it is excluded
// (NodeTimedOut, an event, no failure counted, so no halt) and the next wave goes. The
// rotation completes without it; when s-a reports generation 2 it rejoins as current.
func testRotationStuckNode(t *testing.T, c client.Client) {
	nodes := []string{"s-a", "s-b", "s-c"}
	one, zero := intstr.FromInt32(1), int32(0)
	rolloutPool(t, c, "stuck", "rs", &brewletv1.RolloutPolicy{MaxUnavailable: &one, MaxFailures: &zero, NodeTimeout: &metav1.Duration{Duration: 5 * time.Second}}, nodes...)
	for _, n := range nodes {
		report(t, c, n, "rs", "Ready", 1)
	}
	rotateTo(t, c, "rs", 2)
	expectAllowed(t, c, "wave 1 of generation 2", "rs", nodes, 2, 1, 1)
	if d := directiveFor(nrtSpec(t, c, "s-a"), "rs"); d == nil || d.InstallBy == nil {
		t.Fatalf("s-a allowed generation 2 without an installBy: %+v", d)
	}
	report(t, c, "s-a", "rs", "Installing", 2)
	// Five seconds later s-a is past its installBy: the next node gets the slot.
	expectAllowed(t, c, "wave 2 of generation 2, s-a timed out", "rs", nodes, 2, 2, 1)
	expectRotation(t, c, "rs", "s-a excluded as stuck, not failed", func(ri *brewletv1.RuntimeImage) bool {
		r := ri.Status.Rotation
		return r.Nodes.Stuck == 1 && r.Nodes.Excluded == 1 && r.Nodes.Failed == 0 && len(r.ExcludedNodes) == 1 &&
			r.ExcludedNodes[0].Name == "s-a" && r.ExcludedNodes[0].Reason == string(vocab.ReasonNodeTimedOut) &&
			condIs(ri, vocab.ConditionRotationProgressing, "True", vocab.ReasonRotating)
	})
	expectEvent(t, c, "rs", vocab.ReasonNodeTimedOut, corev1.EventTypeWarning)
	report(t, c, "s-b", "rs", "Ready", 2)
	expectAllowed(t, c, "wave 3 of generation 2", "rs", nodes, 2, 2, 2)
	report(t, c, "s-c", "rs", "Ready", 2)
	expectRotation(t, c, "rs", "complete without the stuck node", func(ri *brewletv1.RuntimeImage) bool {
		r := ri.Status.Rotation
		return r.RotationCompletedAt != nil && r.Nodes.Current == 2 && r.Nodes.Stuck == 1 &&
			condIs(ri, vocab.ConditionRotationComplete, "True", vocab.ReasonCompleteWithExclusions)
	})
	completedAt := getRI(t, c, "rs").Status.Rotation.RotationCompletedAt
	report(t, c, "s-a", "rs", "Ready", 2)
	expectRotation(t, c, "rs", "s-a rejoins as current", func(ri *brewletv1.RuntimeImage) bool {
		r := ri.Status.Rotation
		return r.Nodes.Current == 3 && r.Nodes.Excluded == 0 && len(r.ExcludedNodes) == 0 &&
			r.RotationCompletedAt != nil && r.RotationCompletedAt.Equal(completedAt) &&
			condIs(ri, vocab.ConditionRotationComplete, "True", vocab.ReasonAllNodesCurrent)
	})
}

// testRotationPaused: with spec.paused a new generation reaches no node; the condition
// says so; unpaused, the first wave goes.
func testRotationPaused(t *testing.T, c client.Client) {
	wavesHeld(t, c, "paused", "rp", []string{"p-a", "p-b"}, func(on bool) {
		kit.UpdateRI(t, c, "rp", func(ri *brewletv1.RuntimeImage) { ri.Spec.Paused = on })
	}, "")
}

// testFleetPaused: the annotation brewlet.sh/rotations-paused on RuntimeClass brewlet holds
// a new generation of every RuntimeImage, with the condition saying what holds it and how to
// resume; "false" lets the waves go.
func testFleetPaused(t *testing.T, c client.Client) {
	setFleetPause := func(v *string) {
		t.Helper()
		rc := &nodev1.RuntimeClass{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: vocab.RuntimeClassName}, rc); err != nil {
			t.Fatal(err)
		}
		base := client.MergeFrom(rc.DeepCopy())
		if v == nil {
			delete(rc.Annotations, vocab.AnnotationRotationsPaused)
		} else {
			metav1.SetMetaDataAnnotation(&rc.ObjectMeta, vocab.AnnotationRotationsPaused, *v)
		}
		if err := c.Patch(context.Background(), rc, base); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { setFleetPause(nil) })
	wavesHeld(t, c, "fleet", "fp", []string{"f-a", "f-b"}, func(on bool) {
		v := map[bool]string{true: "true", false: "false"}[on]
		setFleetPause(&v)
	}, vocab.AnnotationRotationsPaused)

	// The pause lives on RuntimeClass brewlet: deleted while paused, the object the operator
	// recreates carries the pause again. (The first try can meet an operator that has not
	// read the annotation yet; it is tried again then.)
	on := "true"
	kit.Eventually(t, 60*time.Second, "RuntimeClass brewlet recreated with the fleet pause", func() (bool, string) {
		setFleetPause(&on)
		time.Sleep(500 * time.Millisecond) // the operator's watch delivers the annotation
		if err := c.Delete(context.Background(), &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: vocab.RuntimeClassName}}); err != nil {
			return false, err.Error()
		}
		rc := &nodev1.RuntimeClass{}
		for range 50 {
			if err := c.Get(context.Background(), client.ObjectKey{Name: vocab.RuntimeClassName}, rc); err == nil && rc.DeletionTimestamp == nil {
				return rc.Annotations[vocab.AnnotationRotationsPaused] == on, fmt.Sprintf("annotations %v", rc.Annotations)
			}
			time.Sleep(200 * time.Millisecond)
		}
		return false, "not recreated"
	})
	off := "false"
	setFleetPause(&off)
}

// wavesHeld rotates id over a pool of nodes in waves of one while hold(true) applies: no
// node is allowed generation 2 and RotationProgressing is False/RotationPaused (its message
// containing msg); after hold(false) the first wave goes.
func wavesHeld(t *testing.T, c client.Client, pool, id string, nodes []string, hold func(bool), msg string) {
	t.Helper()
	one := intstr.FromInt32(1)
	rolloutPool(t, c, pool, id, &brewletv1.RolloutPolicy{MaxUnavailable: &one}, nodes...)
	for _, n := range nodes {
		report(t, c, n, id, "Ready", 1)
	}
	hold(true)
	rotateTo(t, c, id, 2)
	stays(t, c, id, nodes, 1, 1)
	expectRotation(t, c, id, "paused", func(ri *brewletv1.RuntimeImage) bool {
		cond := meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionRotationProgressing))
		return ri.Status.Rotation.Target.Generation == 2 && condIs(ri, vocab.ConditionRotationProgressing, "False", vocab.ReasonRotationPaused) &&
			cond != nil && strings.Contains(cond.Message, msg)
	})
	stays(t, c, id, nodes, 1, 1)
	hold(false)
	expectAllowed(t, c, "unpaused: wave 1 of generation 2", id, nodes, 2, 1)
}

// rolloutPool makes nodes (their agents alive), RuntimeImage id at digest 1 and a
// NodeProfile named pool offering it over them with rollout r, and waits for the
// directives.
func rolloutPool(t *testing.T, c client.Client, pool, id string, r *brewletv1.RolloutPolicy, nodes ...string) {
	t.Helper()
	key := vocab.NodeRestrictionPrefix + "pool-" + pool
	for _, n := range nodes {
		mkNode(t, c, n, map[string]string{key: pool})
	}
	agentsAlive(t, c, nodes...)
	if err := c.Create(context.Background(), kit.RuntimeImage(id, "127.0.0.1:5000/runtimes/"+id+"@"+kit.DigestN(1))); err != nil {
		t.Fatal(err)
	}
	mkProfile(t, c, pool, key, []string{pool}, func(p *brewletv1.NodeProfile) { p.Spec.Rollout = r }, id)
	kit.Eventually(t, 30*time.Second, "directives for pool "+pool, func() (bool, string) {
		return directiveFor(nrtSpec(t, c, nodes[len(nodes)-1]), id) != nil, fmt.Sprint(allowedOf(t, c, id, nodes...))
	})
}
