package controlplane

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/provisioner/clusterview"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The provisioner's writes are node-scoped by the ValidatingAdmissionPolicy in
// config/policy, judged by the real API server from the node claim of a pod-bound
// service-account token: an agent writes its own NodeRuntime and its own node's
// brewlet.sh/* labels, nothing else.
func TestProvisionerWritesAreNodeScoped(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	ctx, c := context.Background(), cp.Client
	if out, err := cp.Kubectl(t, "apply", "-f", filepath.Join(framework.RepoRoot(t), "config/policy/provisioner-node-scope.yaml")); err != nil {
		t.Fatalf("apply policy: %v\n%s", err, out)
	}
	const ns, sa = "brewlet-system", "brewlet-provisioner"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"n1", "n2"} {
		must(c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"pool": "general"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{startupTaint, otherTaint}}}))
		must(c.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}))
	must(c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"node.brewlet.sh"}, Resources: []string{"noderuntimes", "noderuntimes/status"}, Verbs: []string{"get", "create", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "update", "patch"}},
	}}))
	must(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: sa},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}))
	agent := nodeBoundClient(t, cp, ns, sa, "n1")
	kit.WaitNodeScopeDenies(t, agent, "n2")
	if err := kit.WriteStatus(ctx, agent, "n1"); err != nil {
		t.Fatalf("agent could not write its own NodeRuntime status: %v", err)
	}
	if err := kit.LabelNode(ctx, agent, "n1", vocab.RuntimeLabel("python-3.12"), "ready"); err != nil {
		t.Fatalf("agent could not label its own node: %v", err)
	}
	kit.ExpectDenied(t, kit.LabelNode(ctx, agent, "n2", vocab.LabelRuntime, "ready"), "agents write only their own node")
	kit.ExpectDenied(t, kit.LabelNode(ctx, agent, "n1", "pool", "gpu"), "only Brewlet's labels")
	// An unbound token of the same service account has no node claim.
	kit.ExpectDenied(t, kit.WriteStatus(ctx, kit.SAClient(t, cp.Config, ns, sa, nil), "n1"), "no node claim")
	startupTaintsAreTheOnlySpecChange(t, c, cp.KubeletClient(t, "n1"), agent)
	gcFieldsAreNotTheAgents(t, c, agent)
}

// What the garbage collector acts on is not the agent's to change, even on its own objects:
// an owner reference to an object that does not exist would have its Node or NodeRuntime
// deleted, a finalizer would hold their deletion. It creates its NodeRuntime owned by its
// own Node only.
func gcFieldsAreNotTheAgents(t *testing.T, admin, agent client.Client) {
	ctx := context.Background()
	const why = "owner references or finalizers of its Node or NodeRuntime"
	ghost := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "gone", UID: "00000000-0000-0000-0000-000000000000"}
	for _, own := range []client.Object{&brewletv1.NodeRuntime{}, &corev1.Node{}} {
		if err := agent.Get(ctx, client.ObjectKey{Name: "n1"}, own); err != nil {
			t.Fatal(err)
		}
		owned := own.DeepCopyObject().(client.Object)
		owned.SetOwnerReferences(append(owned.GetOwnerReferences(), ghost))
		kit.ExpectDenied(t, agent.Update(ctx, owned), why)
		held := own.DeepCopyObject().(client.Object)
		held.SetFinalizers(append(held.GetFinalizers(), "hold.example/forever"))
		kit.ExpectDenied(t, agent.Update(ctx, held), why)
	}

	// Created anew (an administrator deleted it): owned by its own Node, nothing else.
	if err := admin.Delete(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	var n1 corev1.Node
	if err := admin.Get(ctx, client.ObjectKey{Name: "n1"}, &n1); err != nil {
		t.Fatal(err)
	}
	mine := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "n1", UID: n1.UID}
	kit.ExpectDenied(t, agent.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1",
		OwnerReferences: []metav1.OwnerReference{ghost}}}), why)
	kit.ExpectDenied(t, agent.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1",
		OwnerReferences: []metav1.OwnerReference{mine}, Finalizers: []string{"hold.example/forever"}}}), why)
	if err := agent.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1", OwnerReferences: []metav1.OwnerReference{mine}}}); err != nil {
		t.Fatalf("the agent creating its NodeRuntime owned by its Node: %v", err)
	}
}

var (
	startupTaint = corev1.Taint{Key: vocab.TaintRuntimeNotReady, Effect: corev1.TaintEffectNoSchedule}
	otherTaint   = corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoExecute}
)

// The agent's one right on its Node's spec is removing the startup taints (autoscaler
// templates, docs/install.md "Autoscalers"): every next-larger change is refused by the
// policy, and the kubelet cannot remove the taint itself (NodeRestriction).
func startupTaintsAreTheOnlySpecChange(t *testing.T, admin, kubelet, agent client.Client) {
	t.Helper()
	ctx := context.Background()
	const refused = "may change the spec of its Node only by removing the startup taints"
	spec := func(node string, edit func(*corev1.NodeSpec)) error {
		n := &corev1.Node{}
		if err := agent.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return err
		}
		patch := client.MergeFrom(n.DeepCopy())
		edit(&n.Spec)
		return agent.Patch(ctx, n, patch)
	}
	kit.ExpectDenied(t, spec("n1", func(s *corev1.NodeSpec) { s.Taints = []corev1.Taint{startupTaint} }), refused)
	kit.ExpectDenied(t, spec("n1", func(s *corev1.NodeSpec) { s.Taints = nil }), refused)
	kit.ExpectDenied(t, spec("n1", func(s *corev1.NodeSpec) {
		s.Taints = append(s.Taints, corev1.Taint{Key: "example.com/mine", Effect: corev1.TaintEffectNoSchedule})
	}), refused)
	kit.ExpectDenied(t, spec("n1", func(s *corev1.NodeSpec) {
		s.Taints = []corev1.Taint{otherTaint, {Key: vocab.TaintRuntimeNotReady, Effect: corev1.TaintEffectPreferNoSchedule}}
	}), refused)
	kit.ExpectDenied(t, spec("n1", func(s *corev1.NodeSpec) { s.Unschedulable = true }), refused)
	kit.ExpectDenied(t, spec("n1", func(s *corev1.NodeSpec) { s.ProviderID = "example://forged" }), refused)
	kit.ExpectDenied(t, spec("n1", func(s *corev1.NodeSpec) { s.PodCIDR, s.PodCIDRs = "10.9.0.0/24", []string{"10.9.0.0/24"} }), refused)
	// Another node's startup taint, with the agent's own code.
	_, err := clusterview.Cluster{Client: agent, NodeName: "n2"}.RemoveStartupTaints(ctx, []string{vocab.TaintRuntimeNotReady})
	kit.ExpectDenied(t, err, "agents write only their own node")
	// The kubelet of n1 may not remove it either.
	n := &corev1.Node{}
	if err := kubelet.Get(ctx, client.ObjectKey{Name: "n1"}, n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Spec.Taints = []corev1.Taint{otherTaint}
	kit.ExpectDenied(t, kubelet.Patch(ctx, n, patch), "not allowed to modify taints")

	removed, err := clusterview.Cluster{Client: agent, NodeName: "n1"}.RemoveStartupTaints(ctx, []string{vocab.TaintRuntimeNotReady})
	if err != nil || len(removed) != 1 {
		t.Fatalf("agent removing its own node's startup taint: removed %v, %v", removed, err)
	}
	// n1 keeps every other taint (the API server's own not-ready one too); n2 keeps all.
	for node, want := range map[string]bool{"n1": false, "n2": true} {
		if err := admin.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			t.Fatal(err)
		}
		has := map[string]bool{}
		for _, tn := range n.Spec.Taints {
			has[tn.Key] = true
		}
		if has[vocab.TaintRuntimeNotReady] != want || !has[otherTaint.Key] {
			t.Errorf("node %s taints %+v: startup taint present %v, want %v, and %s kept", node, n.Spec.Taints, has[vocab.TaintRuntimeNotReady], want, otherTaint.Key)
		}
	}
	// Gone once, it is not looked for again: nothing to remove, nothing written.
	if removed, err := (clusterview.Cluster{Client: agent, NodeName: "n1"}).RemoveStartupTaints(ctx, []string{vocab.TaintRuntimeNotReady}); err != nil || len(removed) != 0 {
		t.Errorf("second removal: %v, %v", removed, err)
	}
}

// nodeBoundClient is a client with the token the kubelet mounts into a pod of service
// account ns/sa running on node: bound to that pod, so it carries the node claim.
func nodeBoundClient(t *testing.T, cp *framework.ControlPlane, ns, sa, node string) client.Client {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node, Namespace: ns}, Spec: corev1.PodSpec{
		NodeName: node, ServiceAccountName: sa, Containers: []corev1.Container{{Name: "agent", Image: "registry.invalid/agent@" + kit.GoodDigest}}}}
	if err := cp.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return kit.SAClient(t, cp.Config, ns, sa, pod)
}
