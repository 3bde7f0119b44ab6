package controlplane

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// chartAgentUnderRBAC proves the chart's provisioner RBAC with its node-scope policy for a
// token bound to a pod on node n1: what an agent does on its own node is granted, one step
// beyond it is refused.
func chartAgentUnderRBAC(t *testing.T, cp *framework.ControlPlane) {
	ctx, c := context.Background(), cp.Client
	const ns, sa = kit.ChartNS, "brewlet-provisioner"
	for _, n := range []string{"n1", "n2"} {
		kit.Must(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"node-restriction.kubernetes.io/pool": "general"}}}))
	}
	kit.Must(t, c.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}))
	agent := nodeBoundClient(t, cp, ns, sa, "n1")
	kit.WaitNodeScopeDenies(t, agent, "n2")
	// What the agent does on its own node, with the chart's RBAC: read the cluster's
	// profiles and images, create its NodeRuntime, report status, label its node, hold its
	// writer Lease.
	var profiles brewletv1.NodeProfileList
	kit.Must(t, agent.List(ctx, &profiles))
	var ris brewletv1.RuntimeImageList
	kit.Must(t, agent.List(ctx, &ris))
	ctrl := true
	n1 := &corev1.Node{}
	kit.Must(t, agent.Get(ctx, client.ObjectKey{Name: "n1"}, n1))
	kit.ExpectDenied(t, agent.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: brewletv1.NodeRuntimeSpec{Runtimes: []brewletv1.RuntimeDirective{{ID: "python-3.12", Install: "Eager", AllowedGeneration: 1}}}}),
		"only with an empty spec")
	if err := agent.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: n1.UID, Controller: &ctrl}}}}); err != nil {
		t.Fatalf("agent could not create its own NodeRuntime: %v", err)
	}
	if err := kit.WriteStatus(ctx, agent, "n1"); err != nil {
		t.Fatalf("agent could not write its own NodeRuntime status: %v", err)
	}
	for _, key := range []string{vocab.LabelRuntime, vocab.RuntimeLabel("python-3.12"), vocab.LabelHostChanges} {
		if err := kit.LabelNode(ctx, agent, "n1", key, "ready"); err != nil {
			t.Fatalf("agent could not set %s on its own node: %v", key, err)
		}
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-provisioner-n1", Namespace: ns}}
	if err := agent.Create(ctx, lease); err != nil {
		t.Fatalf("agent could not create its writer Lease: %v", err)
	}
	holder := "agent-n1"
	lease.Spec.HolderIdentity = &holder
	if err := agent.Update(ctx, lease); err != nil {
		t.Fatalf("agent could not renew its writer Lease: %v", err)
	}
	// ... and what it may not do.
	kit.ExpectDenied(t, kit.LabelNode(ctx, agent, "n2", vocab.RuntimeLabel("python-3.12"), "ready"), "agents write only their own node")
	kit.ExpectDenied(t, kit.LabelNode(ctx, agent, "n1", "node-restriction.kubernetes.io/pool", "gpu"), "only Brewlet's labels")
	kit.ExpectDenied(t, kit.LabelNode(ctx, agent, "n1", "node-restriction.kubernetes.io/other", "x"), "only Brewlet's labels")
	kit.ExpectDenied(t, agent.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n3"}}), "agents write only their own node")
	if err := agent.Delete(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}); !apierrors.IsForbidden(err) {
		t.Errorf("agent deleting a NodeRuntime: %v, want forbidden (no delete right)", err)
	}
	if err := agent.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		t.Errorf("agent listing Secrets: %v, want forbidden", err)
	}
	if err := agent.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}}); !apierrors.IsForbidden(err) {
		t.Errorf("agent creating a Lease outside its namespace: %v, want forbidden", err)
	}
	// One step beyond its own Lease: another node's (taking it would stop that node's
	// authorizations), the operator's leader Lease (no controller would run again), any
	// other name; and the spec of its own NodeRuntime (the operator's).
	kit.ExpectDenied(t, agent.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-provisioner-n2", Namespace: ns}}),
		"agents write only their own node (brewlet-provisioner-n1)")
	kit.ExpectDenied(t, agent.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: ns}}),
		"agents write only their own node (brewlet-provisioner-n1)")
	opLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-operator", Namespace: ns}}
	kit.Must(t, c.Create(ctx, opLease))
	var stolen coordinationv1.Lease
	kit.Must(t, agent.Get(ctx, client.ObjectKeyFromObject(opLease), &stolen))
	thief := "agent-n1"
	stolen.Spec.HolderIdentity = &thief
	kit.ExpectDenied(t, agent.Update(ctx, &stolen), "agents write only their own node (brewlet-provisioner-n1)")
	if err := agent.Delete(ctx, &stolen); !apierrors.IsForbidden(err) {
		t.Errorf("agent deleting the operator's leader Lease: %v, want forbidden (RBAC grants no delete of Leases)", err)
	}
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-provisioner-n2", Namespace: ns}}
	kit.Must(t, c.Create(ctx, other))
	kit.Must(t, agent.Get(ctx, client.ObjectKeyFromObject(other), other))
	other.Spec.HolderIdentity = &thief
	kit.ExpectDenied(t, agent.Update(ctx, other), "agents write only their own node (brewlet-provisioner-n1)")
	var own brewletv1.NodeRuntime
	kit.Must(t, agent.Get(ctx, client.ObjectKey{Name: "n1"}, &own))
	own.Spec.Runtimes = []brewletv1.RuntimeDirective{{ID: "python-3.12", Install: "Eager", Quarantine: true}}
	if err := agent.Update(ctx, &own); !apierrors.IsForbidden(err) {
		t.Errorf("agent updating its own NodeRuntime's spec: %v, want forbidden (RBAC grants no update of noderuntimes)", err)
	}
	// A token of the same service account without the pod binding has no node claim.
	kit.ExpectDenied(t, kit.WriteStatus(ctx, kit.SAClient(t, cp.Config, ns, sa, nil), "n1"), "no node claim")
}
