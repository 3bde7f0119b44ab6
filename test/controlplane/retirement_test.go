package controlplane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// A node deleted before its cleanup ran keeps its obligation (RetirementPending); a
// replacement with the same name is served anew and does not clear it; evidence with a
// wrong UID is Blocked; the right evidence, recorded by an administrator holding only the
// chart's unbound retirement ClusterRole, is Accepted and then Resolved; the profile's
// deletion then completes once the replacement's agent reports its own cleanup.
func TestNodeLossAndRetirementEvidence(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	kit.StartOperator(t, cp, false)
	ctx, c := context.Background(), cp.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, kit.RuntimeImage(kit.PyID, "127.0.0.1:5000/runtimes/python@"+kit.DigestN(1))))
	must(c.Create(ctx, &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}, Spec: brewletv1.NodeProfileSpec{
		NodePool:      brewletv1.NodePool{Key: "node-restriction.kubernetes.io/pool", Names: []string{"general"}},
		RuntimeImages: []brewletv1.OfferedRuntime{{ID: kit.PyID}}}}))
	newNode := func() *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"node-restriction.kubernetes.io/pool": "general"}}}
		must(c.Create(ctx, n))
		return n
	}
	profile := func() *brewletv1.NodeProfile {
		p := &brewletv1.NodeProfile{}
		must(c.Get(ctx, client.ObjectKey{Name: "general"}, p))
		return p
	}
	ledger := func(p *brewletv1.NodeProfile) string {
		var out []string
		for _, e := range p.Status.Ledger {
			out = append(out, fmt.Sprintf("%s/%s owed=%t", e.NodeName, e.NodeUID, e.Owed))
		}
		return strings.Join(out, ", ")
	}
	first := newNode()
	kit.Eventually(t, 30*time.Second, "the node recorded in the ledger", func() (bool, string) {
		p := profile()
		return ledger(p) == fmt.Sprintf("n1/%s owed=false", first.UID), ledger(p)
	})

	// The Node object goes before any cleanup ran; a replacement with the same name comes.
	must(c.Delete(ctx, first))
	kit.Eventually(t, 30*time.Second, "RetirementPending", func() (bool, string) {
		p := profile()
		cond := meta.FindStatusCondition(p.Status.Conditions, string(vocab.ConditionRetirementPending))
		return cond != nil && cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, string(first.UID)), fmt.Sprintf("%+v %s", cond, ledger(p))
	})
	second := newNode()
	kit.Eventually(t, 30*time.Second, "the replacement served, the old obligation kept", func() (bool, string) {
		p := profile()
		want := map[string]bool{fmt.Sprintf("n1/%s owed=true", first.UID): true, fmt.Sprintf("n1/%s owed=false", second.UID): true}
		got := 0
		for _, e := range strings.Split(ledger(p), ", ") {
			if want[e] {
				got++
			}
		}
		spec := nrtSpec(t, c, "n1")
		return got == 2 && len(p.Status.Ledger) == 2 && len(spec.Runtimes) == 1, fmt.Sprintf("%s; spec %+v", ledger(p), spec)
	})

	// An administrator with only the retirement ClusterRole records evidence.
	admin := retirementAdmin(t, cp)
	if err := admin.Delete(ctx, &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}}); !apierrors.IsForbidden(err) {
		t.Fatalf("the retirement role may delete profiles: %v", err)
	}
	evidence := func(name, uid string) *brewletv1.NodeRetirementEvidence {
		return &brewletv1.NodeRetirementEvidence{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: brewletv1.NodeRetirementEvidenceSpec{
			NodeName: "n1", NodeUID: uid, InstanceID: "i-0123", RetiredAt: metav1.NewTime(time.Now().Add(-time.Minute)), EvidenceRef: "https://tickets.example/42"}}
	}
	phase := func(name string) (string, string) {
		e := &brewletv1.NodeRetirementEvidence{}
		must(c.Get(ctx, client.ObjectKey{Name: name}, e))
		return e.Status.Phase, e.Status.Message
	}
	must(admin.Create(ctx, evidence("wrong-uid", "not-the-uid")))
	kit.Eventually(t, 30*time.Second, "wrong UID blocked", func() (bool, string) {
		p, msg := phase("wrong-uid")
		return p == brewletv1.EvidenceBlocked && strings.Contains(msg, "no NodeProfile ledger lists node n1"), p + ": " + msg
	})
	must(admin.Create(ctx, evidence("live-node", string(second.UID))))
	kit.Eventually(t, 30*time.Second, "a live node's UID blocked", func() (bool, string) {
		p, msg := phase("live-node")
		return p == brewletv1.EvidenceBlocked && strings.Contains(msg, "still exists"), p + ": " + msg
	})
	must(admin.Create(ctx, evidence("destroyed", string(first.UID))))
	kit.Eventually(t, 30*time.Second, "the right evidence resolved", func() (bool, string) {
		p, msg := phase("destroyed")
		return p == brewletv1.EvidenceResolved, p + ": " + msg
	})
	p := profile()
	if ledger(p) != fmt.Sprintf("n1/%s owed=false", second.UID) {
		t.Fatalf("ledger after the evidence: %s", ledger(p))
	}
	if cond := meta.FindStatusCondition(p.Status.Conditions, string(vocab.ConditionRetirementPending)); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Fatalf("RetirementPending after the evidence: %+v", cond)
	}

	// Deleting the profile waits for the replacement's own cleanup report (by its UID).
	must(c.Delete(ctx, p))
	time.Sleep(2 * time.Second)
	if p := profile(); len(p.Finalizers) != 1 {
		t.Fatalf("the profile went before the node's cleanup: %+v", p.Finalizers)
	}
	nrt := &brewletv1.NodeRuntime{}
	must(c.Get(ctx, client.ObjectKey{Name: "n1"}, nrt))
	nrt.Status = brewletv1.NodeRuntimeStatus{NodeUID: second.UID, Cleanup: &brewletv1.NodeCleanup{Done: true}}
	must(c.Status().Update(ctx, nrt))
	kit.Eventually(t, 30*time.Second, "the profile deleted", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKey{Name: "general"}, &brewletv1.NodeProfile{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
}

// retirementAdmin is a client of a service account bound only to the chart's
// brewlet-retirement-evidence ClusterRole.
func retirementAdmin(t *testing.T, cp *framework.ControlPlane) client.Client {
	t.Helper()
	ctx := context.Background()
	for _, o := range kit.ChartMustRender(t, kit.ChartNS, "--set", "provisioner.enabled=false") {
		if o.Kind != "ClusterRole" || o.Name != "brewlet-retirement-evidence" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(o.JSON); err != nil {
			t.Fatal(err)
		}
		if err := cp.Client.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: kit.ChartNS, Name: "evidence-admin"}}
	if err := cp.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "evidence-admin"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "brewlet-retirement-evidence"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: kit.ChartNS, Name: "evidence-admin"}}}); err != nil {
		t.Fatal(err)
	}
	return kit.SAClient(t, cp.Config, kit.ChartNS, "evidence-admin", nil)
}
