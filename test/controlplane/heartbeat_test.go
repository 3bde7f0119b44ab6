package controlplane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/kit"
)

// A node's heartbeat counts on the operator's clock, not the node's (real API server,
// controller-manager and kwok nodes, the operator as its own process): after a rotation, a
// workload that did not opt in keeps generation-1 pods on both nodes; then node 0's clock
// jumps an hour ahead and its agent stops renewing. Its renewTime lies in the future for
// an hour, yet once --node-stale-after passes on the operator's clock its containers show
// current=false, while node 1, which keeps renewing, stays current. Then the nodes' reports
// turn hostile: node 0's leaves out observedAt and node 1's claims generation 2 under a
// digest the RuntimeImage never had. Each is excluded as ReportInvalid (with a Warning
// event), neither counts as serving, and the status stays writable.
func TestHeartbeatsOnTheOperatorsClock(t *testing.T) {
	const staleAfter = 10 * time.Second
	w := startRestartWorld(t, 5, 10*time.Minute, "--node-stale-after="+staleAfter.String())
	ctx, c := context.Background(), w.cp.Client
	kit.Must(t, c.Create(ctx, kit.RuntimeImage("python", "127.0.0.1:5000/runtimes/python@"+kit.DigestN(1))))
	kit.Eventually(t, 30*time.Second, "generation 1", func() (bool, string) {
		got := getRI(t, c, "python")
		return got.Status.Generation == 1, fmt.Sprintf("%+v", got.Status)
	})
	epoch := string(getRI(t, c, "python").UID)
	w.podGen = func(*corev1.Pod) int64 { return 1 }
	for _, node := range w.nodes {
		d := restartDeployment("on-"+node, false)
		d.Spec.Replicas = ptr.To[int32](1)
		d.Spec.Template.Spec.NodeName = node
		kit.Must(t, c.Create(ctx, d))
	}
	w.waitRunning(t, 2)
	w.report(t, 1, epoch)
	kit.UpdateRI(t, c, "python", func(ri *brewletv1.RuntimeImage) {
		ri.Spec.Source.Image = "127.0.0.1:5000/runtimes/python@" + kit.DigestN(2)
	})
	kit.Eventually(t, 30*time.Second, "generation 2", func() (bool, string) {
		got := getRI(t, c, "python")
		return got.Status.Generation == 2, fmt.Sprintf("%+v", got.Status)
	})
	w.report(t, 2, epoch)
	observed := func() map[string]bool {
		out := map[string]bool{}
		for _, o := range getRI(t, c, "python").Status.TaskObservations {
			out[o.NodeName] = o.Current
		}
		return out
	}
	kit.Eventually(t, 30*time.Second, "both nodes' old containers observed, current", func() (bool, string) {
		w.heartbeat(t, w.nodes[1])
		got := observed()
		return len(got) == 2 && got[w.nodes[0]] && got[w.nodes[1]], fmt.Sprintf("%v", got)
	})

	// Node 0's clock an hour ahead, then its agent silent.
	l := &coordinationv1.Lease{}
	kit.Must(t, c.Get(ctx, client.ObjectKey{Namespace: kit.ChartNS, Name: vocab.AgentLeasePrefix + w.nodes[0]}, l))
	ahead := metav1.NewMicroTime(time.Now().Add(time.Hour))
	l.Spec.RenewTime = &ahead
	kit.Must(t, c.Update(ctx, l))
	silentSince := time.Now()
	var ri *brewletv1.RuntimeImage
	kit.Eventually(t, 6*staleAfter, "node 0 not current, node 1 current", func() (bool, string) {
		w.heartbeat(t, w.nodes[1])
		ri = getRI(t, c, "python")
		got := observed()
		return len(got) == 2 && !got[w.nodes[0]] && got[w.nodes[1]], fmt.Sprintf("%v", got)
	})
	if since := time.Since(silentSince); since < staleAfter {
		t.Errorf("node 0 marked not reporting %s after its last renewal, before --node-stale-after=%s", since.Round(time.Millisecond), staleAfter)
	}
	t.Logf("node 0 (renewTime an hour ahead) not current after %s; OldGenerationTasks: %+v", time.Since(silentSince).Round(time.Second),
		meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionOldGenerationTasks)))

	// A hostile report: node 0 leaves observedAt out (required in the RuntimeImage's entry)
	// and reports a container with a 300-character name. Only its own entry suffers: it is
	// left out and named in the condition, and node 1 stays observed (the status stays
	// writable for the whole fleet).
	nrt := &brewletv1.NodeRuntime{}
	kit.Must(t, c.Get(ctx, client.ObjectKey{Name: w.nodes[0]}, nrt))
	nrt.Status.ObservedAt = nil
	nrt.Status.Tasks = append(nrt.Status.Tasks, brewletv1.NodeTask{PodNamespace: restartNS, PodName: strings.Repeat("x", 300),
		PodUID: "0", ContainerName: "app", ID: "python", Epoch: types.UID(epoch), Generation: 1})
	kit.Must(t, c.Status().Update(ctx, nrt))
	kit.Eventually(t, 30*time.Second, "node 0's unusable report left out, node 1 still observed", func() (bool, string) {
		w.heartbeat(t, w.nodes[1])
		ri = getRI(t, c, "python")
		cond := meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionOldGenerationTasks))
		got := observed()
		_, listed0 := got[w.nodes[0]]
		return !listed0 && got[w.nodes[1]] && cond != nil && strings.Contains(cond.Message, "1 node sent a report that cannot be used"),
			fmt.Sprintf("%v %+v", got, cond)
	})
	// The rotation does not believe that report either: node 0 is excluded as ReportInvalid
	// (before being silent: its report, not its heartbeat, is what cannot be used).
	kit.Eventually(t, 30*time.Second, "node 0 excluded as ReportInvalid", func() (bool, string) {
		w.heartbeat(t, w.nodes[1])
		ri = getRI(t, c, "python")
		return excludedAs(ri, w.nodes[0]) == vocab.ReasonReportInvalid, fmt.Sprintf("%+v", ri.Status.Rotation)
	})

	// A lying report: node 1 claims to serve generation 2 under a digest the RuntimeImage never
	// had. It is not counted as serving: excluded and named, with a Warning event, and the
	// status stays writable.
	kit.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lie := &brewletv1.NodeRuntime{}
		if err := c.Get(ctx, client.ObjectKey{Name: w.nodes[1]}, lie); err != nil {
			return err
		}
		for i := range lie.Status.Runtimes {
			lie.Status.Runtimes[i].Digest = kit.DigestN(3)
		}
		return c.Status().Update(ctx, lie)
	}))
	kit.Eventually(t, 30*time.Second, "node 1 excluded as ReportInvalid, no node counted as serving", func() (bool, string) {
		w.heartbeat(t, w.nodes[1])
		ri = getRI(t, c, "python")
		rot := ri.Status.Rotation
		return excludedAs(ri, w.nodes[1]) == vocab.ReasonReportInvalid && rot.Nodes.Current == 0, fmt.Sprintf("%+v", rot)
	})
	expectEvent(t, c, "python", vocab.ReasonReportInvalid, corev1.EventTypeWarning)
}

// excludedAs is the reason the RuntimeImage's rotation excludes node for ("": not excluded).
func excludedAs(ri *brewletv1.RuntimeImage, node string) vocab.Reason {
	if ri.Status.Rotation == nil {
		return ""
	}
	for _, x := range ri.Status.Rotation.ExcludedNodes {
		if x.Name == node {
			return vocab.Reason(x.Reason)
		}
	}
	return ""
}
