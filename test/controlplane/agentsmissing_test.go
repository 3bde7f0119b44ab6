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
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/kit"
)

// privateRootError is what containerd answers the kubelet for the chart's default
// hostRootPropagation on a node whose root mount is private (seen on a fresh machine).
const privateRootError = `failed to generate container "0c1f" spec: failed to generate spec: path "/" is mounted on "/" but it is not a shared or slave mount`

// testAgentsMissing: a node of the pool whose agent never ran is named in the NodeProfile's
// status with what the cluster knows, first no pod, then the kubelet's CreateContainerError
// with the chart value that fixes it, and the RuntimeImage's rotation message names it; once
// the agent renews its Lease the node leaves the list. The agent pod's status is written the
// way the kubelet writes it (this tier runs no kubelet).
func testAgentsMissing(t *testing.T, c client.Client) {
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const node, id = "na-1", "py-agents"
	mkNode(t, c, node, map[string]string{"node-restriction.kubernetes.io/agents-pool": "a"})
	must(c.Create(ctx, kit.RuntimeImage(id, "registry.example/runtimes/python@"+kit.GoodDigest)))
	mkProfile(t, c, "agents", "node-restriction.kubernetes.io/agents-pool", []string{"a"}, nil, id)
	problem := func(want vocab.Reason, parts ...string) {
		t.Helper()
		kit.Eventually(t, 90*time.Second, fmt.Sprintf("NodeProfile agents lists %s as %s", node, want), func() (bool, string) {
			st := getNP(t, c, "agents").Status
			if st.NodesWithoutAgentCount != 1 || len(st.NodesWithoutAgent) != 1 {
				return false, fmt.Sprintf("%+v", st.NodesWithoutAgent)
			}
			pr := st.NodesWithoutAgent[0]
			if pr.NodeName != node || pr.Reason != string(want) {
				return false, fmt.Sprintf("%+v", pr)
			}
			for _, p := range parts {
				if !strings.Contains(pr.Message, p) {
					return false, pr.Message
				}
			}
			ready := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionReady))
			return ready != nil && strings.Contains(ready.Message, node+" ("+string(want)+")"), fmt.Sprintf("Ready: %+v", ready)
		})
	}
	problem(vocab.ReasonAgentPodMissing, "no brewlet-provisioner pod runs on node "+node)

	must(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent-stand-in", Namespace: kit.ChartNS}}))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-provisioner-x7k2p", Namespace: kit.ChartNS, Labels: vocab.AgentPodLabels},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "agent-stand-in", Containers: []corev1.Container{{Name: "provisioner", Image: "registry.example/brewlet-provisioner@" + kit.GoodDigest}}}}
	must(c.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "provisioner", Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: privateRootError}}}}}
	must(c.Status().Update(ctx, pod))
	problem(vocab.ReasonAgentContainerFailing, pod.Name, "CreateContainerError", "not a shared or slave mount", "hostRootPropagation=None")
	kit.Eventually(t, 60*time.Second, "the RuntimeImage's rotation message names the node", func() (bool, string) {
		ri := &brewletv1.RuntimeImage{}
		if err := c.Get(ctx, client.ObjectKey{Name: id}, ri); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionRotationProgressing))
		return cond != nil && strings.Contains(cond.Message, "nodes without a running agent: "+node+" (AgentContainerFailing)"), fmt.Sprintf("%+v", cond)
	})

	// The agent starts and renews its Lease: the node is no longer listed.
	now := metav1.NewMicroTime(time.Now())
	holder := "agent-" + node
	must(c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-provisioner-" + node, Namespace: kit.ChartNS},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &now}}))
	kit.Eventually(t, 90*time.Second, "the node leaves status.nodesWithoutAgent", func() (bool, string) {
		st := getNP(t, c, "agents").Status
		return st.NodesWithoutAgentCount == 0 && len(st.NodesWithoutAgent) == 0, fmt.Sprintf("%+v", st.NodesWithoutAgent)
	})
}
