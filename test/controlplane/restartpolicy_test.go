package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The operator's rights on workloads, judged by a real API server with the operator's own
// service-account token: the chart's restart RBAC and its ValidatingAdmissionPolicy
// brewlet-operator-restarts (docs/security.md) let it set the pod-template barrier of opted-in
// Deployments, StatefulSets and DaemonSets, and nothing else; with
// operator.rotationRestarts.namespaces, only in those namespaces.
func TestOperatorRestartPolicy(t *testing.T) {
	framework.Tool(t, "helm")
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	ctx, admin := context.Background(), cp.Client
	const apps = "apps-under-test"
	protected := []string{"kube-system", "kube-public", "kube-node-lease"}
	for _, ns := range append([]string{kit.ChartNS, apps, "ns-a", "ns-b"}, protected...) {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	// The RuntimeImage the workloads run: the policy reads every RuntimeImage (its
	// parameters) to judge a barrier's epoch and generation.
	ri := kit.RuntimeImage("python", "registry.example/python@"+kit.GoodDigest)
	rpMust(t, admin.Create(ctx, ri))
	ri.Status.Epoch, ri.Status.Generation, ri.Status.Digest, ri.Status.ObservedGeneration = ri.UID, rpReached, kit.GoodDigest, ri.Generation
	rpMust(t, admin.Status().Update(ctx, ri))
	barrier := func(generation int) string { return rpBarrier(ri.UID, generation) }

	// The chart rendered against this API server (--validate: the capabilities come from its
	// discovery, which announces the ValidatingAdmissionPolicy kind the chart requires), its
	// operator RBAC and restarts policy installed.
	rc, out, err := kit.ChartTemplateRaw(t, kit.ChartNS, "--validate", "--kubeconfig", cp.Kubeconfig,
		"--set", "provisioner.enabled=false", "--set", "operator.rotationRestarts.enabled=true")
	if err != nil {
		t.Fatalf("helm template --validate with rotation restarts: %v\n%s", err, out)
	}
	rpInstall(t, admin, rc)
	op := kit.SAClient(t, cp.Config, kit.ChartNS, "brewlet-operator", nil)

	// Workloads, created by the cluster admin.
	web := rpDeployment(apps, "web", true)
	for _, o := range []client.Object{web, rpDeployment(apps, "plain", false), rpDeployment(apps, "probe", true),
		rpStatefulSet(apps, "db", true), rpDaemonSet(apps, "agent", true),
		rpDeployment("ns-a", "web", true), rpDeployment("ns-b", "web", true)} {
		rpMust(t, admin.Create(ctx, o))
	}
	for _, ns := range protected {
		rpMust(t, admin.Create(ctx, rpDeployment(ns, "web", true)))
	}

	// The policy takes effect asynchronously: wait until a label change is refused (a new
	// value each time: an unchanged object is no change).
	n := 0
	kit.WaitDenied(t, "the operator changing a label", "may change only the pod-template annotation", func() error {
		n++
		return rpPatch(ctx, op, rpRef("Deployment", apps, "probe"), types.MergePatchType, fmt.Sprintf(`{"metadata":{"labels":{"probe":"%d"}}}`, n))
	})

	// The policy reads its parameters from an informer of the API server's own: wait until
	// it has the RuntimeImage (a barrier it has reached is allowed).
	probe := 0
	kit.Eventually(t, 30*time.Second, "the policy knowing the RuntimeImage", func() (bool, string) {
		probe++
		err := rpPatch(ctx, op, rpRef("Deployment", apps, "probe"), types.MergePatchType, rpBarrierPatch(barrier(probe)))
		return err == nil, fmt.Sprint(err)
	})

	deny := func(what string, err error, want string) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: allowed, want a refusal mentioning %q", what, want)
		case !strings.Contains(err.Error(), want):
			t.Errorf("%s: refused with %q, want %q", what, err, want)
		}
	}
	allow := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want allowed", what, err)
		}
	}
	merge, strategic := types.MergePatchType, types.StrategicMergePatchType
	webRef := rpRef("Deployment", apps, "web")
	const only = "may change only the pod-template annotation brewlet.sh/rotated-to-generation of deployments " + apps + "/web"

	t.Run("the barrier on opted-in workloads is allowed", func(t *testing.T) {
		// Exactly the operator's patch (internal/operator/restarts), then a strategic merge
		// patch and an update with a newer barrier.
		allow("merge patch of the barrier", rpPatch(ctx, op, webRef, merge, rpBarrierPatch(barrier(1))))
		allow("strategic merge patch of the barrier", rpPatch(ctx, op, webRef, strategic, rpBarrierPatch(barrier(2))))
		d := &appsv1.Deployment{}
		rpMust(t, op.Get(ctx, client.ObjectKeyFromObject(web), d))
		d.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration] = barrier(3)
		allow("update of the barrier", op.Update(ctx, d))
		rpMust(t, admin.Get(ctx, client.ObjectKeyFromObject(web), d))
		if got := d.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration]; got != barrier(3) {
			t.Errorf("barrier %q after the operator's writes, want %q", got, barrier(3))
		}
		allow("barrier of an opted-in StatefulSet", rpPatch(ctx, op, rpRef("StatefulSet", apps, "db"), merge, rpBarrierPatch(barrier(1))))
		// Each template change of a DaemonSet also moves the API server's own template
		// generation annotation: accepted, twice.
		allow("barrier of an opted-in DaemonSet", rpPatch(ctx, op, rpRef("DaemonSet", apps, "agent"), merge, rpBarrierPatch(barrier(1))))
		allow("a newer barrier of the DaemonSet", rpPatch(ctx, op, rpRef("DaemonSet", apps, "agent"), merge, rpBarrierPatch(barrier(2))))
	})

	t.Run("every other change is denied", func(t *testing.T) {
		before := &appsv1.Deployment{}
		rpMust(t, admin.Get(ctx, client.ObjectKeyFromObject(web), before))
		for _, c := range []struct {
			what string
			pt   types.PatchType
			body string
			want string
		}{
			{"replicas", merge, `{"spec":{"replicas":3}}`, only + "; this request also changes spec.replicas"},
			{"the image", strategic, `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.invalid/app:2"}]}}}}`,
				only + "; this request also changes spec.template.spec"},
			{"the barrier with the image", strategic, `{"spec":{"template":{"metadata":{"annotations":{"` + vocab.AnnotationRotatedToGeneration +
				`":"x"}},"spec":{"containers":[{"name":"app","image":"registry.invalid/app:2"}]}}}}`, "also changes spec.template.spec"},
			{"the strategy", merge, `{"spec":{"strategy":{"type":"Recreate","rollingUpdate":null}}}`, "also changes spec.strategy"},
			{"paused", merge, `{"spec":{"paused":true}}`, "also changes spec.paused"},
			{"a label", merge, `{"metadata":{"labels":{"team":"x"}}}`, "also changes metadata.labels"},
			{"another object annotation", merge, `{"metadata":{"annotations":{"example.com/other":"x"}}}`, "also changes metadata.annotations"},
			{"the opt-in annotation", merge, `{"metadata":{"annotations":{"` + vocab.AnnotationRestartOnRotation + `":null}}}`,
				"also changes metadata.annotations"},
			{"an owner reference", merge, `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"` +
				"0b8ef4cc-6a4c-4f3e-9d4e-2f5c6f0f7a11" + `"}]}}`, "also changes metadata.ownerReferences"},
			{"a finalizer", merge, `{"metadata":{"finalizers":["example.com/keep"]}}`, "also changes metadata.finalizers"},
			{"another pod-template annotation", merge, `{"spec":{"template":{"metadata":{"annotations":{"example.com/other":"x"}}}}}`,
				"also changes spec.template.metadata.annotations['example.com/other']"},
			{"the runtime-image pod-template annotation", merge, `{"spec":{"template":{"metadata":{"annotations":{"` + vocab.AnnotationRuntimeImage +
				`":"other"}}}}}`, "also changes spec.template.metadata.annotations['" + vocab.AnnotationRuntimeImage + "']"},
			{"a pod-template label", merge, `{"spec":{"template":{"metadata":{"labels":{"team":"x"}}}}}`, "also changes spec.template.metadata.labels"},
			{"removing the barrier", merge, `{"spec":{"template":{"metadata":{"annotations":{"` + vocab.AnnotationRotatedToGeneration + `":null}}}}}`,
				"may set, not remove, the pod-template annotation brewlet.sh/rotated-to-generation of deployments " + apps + "/web"},
		} {
			deny("the operator changing "+c.what, rpPatch(ctx, op, webRef, c.pt, c.body), c.want)
		}
		// An update (PUT) with the barrier and one more change.
		d := before.DeepCopy()
		d.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration] = barrier(4)
		d.Spec.Replicas = ptr.To[int32](5)
		deny("the operator updating the barrier and replicas", op.Update(ctx, d), "also changes spec.replicas")
		deny("the operator changing a StatefulSet's replicas", rpPatch(ctx, op, rpRef("StatefulSet", apps, "db"), merge, `{"spec":{"replicas":2}}`),
			"may change only the pod-template annotation brewlet.sh/rotated-to-generation of statefulsets "+apps+"/db; this request also changes spec.replicas")
		deny("the operator changing a DaemonSet's image", rpPatch(ctx, op, rpRef("DaemonSet", apps, "agent"), strategic,
			`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.invalid/app:2"}]}}}}`),
			"of daemonsets "+apps+"/agent; this request also changes spec.template.spec")
		// A workload that did not opt in, even for the barrier alone.
		deny("the operator setting the barrier of a Deployment that did not opt in",
			rpPatch(ctx, op, rpRef("Deployment", apps, "plain"), merge, rpBarrierPatch(barrier(1))),
			"deployments "+apps+"/plain has not opted in to rotation restarts")
		// The protected namespaces, even opted in and for the barrier alone.
		for _, ns := range protected {
			deny("the operator setting the barrier in "+ns, rpPatch(ctx, op, rpRef("Deployment", ns, "web"), merge, rpBarrierPatch(barrier(1))),
				"brewlet-operator never restarts workloads in the protected namespace "+ns)
		}
		after := &appsv1.Deployment{}
		rpMust(t, admin.Get(ctx, client.ObjectKeyFromObject(web), after))
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("a denied write changed the Deployment: resourceVersion %s → %s", before.ResourceVersion, after.ResourceVersion)
		}
	})

	t.Run("only the operator's barrier for a generation the RuntimeImage reached is allowed", func(t *testing.T) {
		shape := `only to {"id":"<the template's brewlet.sh/runtime-image, python>","epoch":"<that RuntimeImage's UID>","generation":N}, not `
		reached := fmt.Sprintf("only to RuntimeImage python's epoch %s and a generation it has reached (%d), not ", ri.UID, rpReached)
		for _, c := range []struct{ what, value, want string }{
			{"a generation beyond the RuntimeImage's", barrier(rpReached + 1), reached},
			{"another epoch", rpBarrier("0b8ef4cc-6a4c-4f3e-9d4e-2f5c6f0f7a11", 1), reached},
			{"another runtime", fmt.Sprintf(`{"id":"node","epoch":"%s","generation":1}`, ri.UID), shape},
			{"generation 0", barrier(0), shape},
			{"another key order", fmt.Sprintf(`{"generation":1,"id":"python","epoch":"%s"}`, ri.UID), shape},
			{"an extra field", strings.TrimSuffix(barrier(1), "}") + `,"x":1}`, shape},
			{"not JSON", "x", shape + "x"},
			{"a huge value", strings.Repeat("9", 100000), shape},
		} {
			deny("the operator setting a barrier with "+c.what, rpPatch(ctx, op, webRef, merge, rpBarrierPatch(c.value)), c.want)
		}
		allow("the barrier of the generation reached", rpPatch(ctx, op, webRef, merge, rpBarrierPatch(barrier(rpReached))))
	})

	t.Run("create, delete and subresources are denied even with RBAC for them", func(t *testing.T) {
		// The chart grants none of them: RBAC refuses first.
		if err := op.Create(ctx, rpDeployment(apps, "new", true)); !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Errorf("the operator creating a Deployment with the chart's RBAC: %v, want RBAC's refusal", err)
		}
		// With those rights granted too (a mistake elsewhere), the policy still refuses.
		extra := "test-operator-extra-rights"
		rpMust(t, admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: extra}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets", "daemonsets"}, Verbs: []string{"create", "delete"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments/scale", "deployments/status"}, Verbs: []string{"get", "update", "patch"}},
		}}))
		rpMust(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: extra},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: extra},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "brewlet-operator", Namespace: kit.ChartNS}}}))
		defer func() {
			rpMust(t, admin.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: extra}}))
			rpMust(t, admin.Delete(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: extra}}))
		}()
		kit.WaitDenied(t, "the operator creating a Deployment", "brewlet-operator may not create deployments "+apps+"/new", func() error {
			return op.Create(ctx, rpDeployment(apps, "new", true))
		})
		deny("the operator creating a StatefulSet", op.Create(ctx, rpStatefulSet(apps, "new", true)), "brewlet-operator may not create statefulsets "+apps+"/new")
		deny("the operator creating a DaemonSet in kube-system", op.Create(ctx, rpDaemonSet("kube-system", "new", true)),
			"brewlet-operator may not create daemonsets kube-system/new")
		deny("the operator deleting an opted-in Deployment", op.Delete(ctx, rpRef("Deployment", apps, "web")),
			"brewlet-operator may not delete deployments "+apps+"/web")
		deny("the operator deleting an opted-in DaemonSet", op.Delete(ctx, rpRef("DaemonSet", apps, "agent")),
			"brewlet-operator may not delete daemonsets "+apps+"/agent")
		deny("the operator scaling an opted-in Deployment", op.SubResource("scale").Patch(ctx, rpRef("Deployment", apps, "web"),
			client.RawPatch(merge, []byte(`{"spec":{"replicas":4}}`))), "may not write deployments/scale "+apps+"/web")
		deny("the operator writing an opted-in Deployment's status", op.Status().Patch(ctx, rpRef("Deployment", apps, "web"),
			client.RawPatch(merge, []byte(`{"status":{"observedGeneration":99}}`))), "may not write deployments/status "+apps+"/web")
		if err := admin.Get(ctx, client.ObjectKey{Namespace: apps, Name: "new"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			t.Errorf("a Deployment created by the operator exists: %v", err)
		}
	})

	t.Run("the cluster admin is not confined", func(t *testing.T) {
		allow("admin changing replicas and labels", rpPatch(ctx, admin, webRef, merge, `{"metadata":{"labels":{"team":"x"}},"spec":{"replicas":2}}`))
		allow("admin removing the barrier", rpPatch(ctx, admin, webRef, merge,
			`{"spec":{"template":{"metadata":{"annotations":{"`+vocab.AnnotationRotatedToGeneration+`":null}}}}}`))
		allow("admin setting the barrier in kube-system", rpPatch(ctx, admin, rpRef("Deployment", "kube-system", "web"), merge, rpBarrierPatch(barrier(1))))
		allow("admin creating a Deployment in kube-system", admin.Create(ctx, rpDeployment("kube-system", "admin", false)))
		allow("admin deleting it", admin.Delete(ctx, rpRef("Deployment", "kube-system", "admin")))
	})

	t.Run("with no RuntimeImage left, nobody's workload writes are refused for it", func(t *testing.T) {
		// The API server collects a policy's parameters before its matchConditions: a
		// parameterised policy that denied without parameters would refuse every user's
		// writes (helm uninstall deleting the operator's own Deployment after its hook
		// deleted the RuntimeImages).
		rpMust(t, admin.Delete(ctx, ri))
		g := rpReached
		kit.Eventually(t, 30*time.Second, "the policy seeing no RuntimeImage (a barrier beyond the deleted one's generation allowed)", func() (bool, string) {
			g++
			err := rpPatch(ctx, op, rpRef("Deployment", apps, "probe"), merge, rpBarrierPatch(barrier(g)))
			return err == nil, fmt.Sprint(err)
		})
		allow("admin changing a label", rpPatch(ctx, admin, webRef, merge, `{"metadata":{"labels":{"after":"runtimes"}}}`))
		allow("admin deleting a workload", admin.Delete(ctx, rpRef("Deployment", apps, "plain")))
		deny("the operator changing a label", rpPatch(ctx, op, webRef, merge, `{"metadata":{"labels":{"after":"operator"}}}`), "also changes metadata.labels")
		deny("the operator setting a malformed barrier", rpPatch(ctx, op, webRef, merge, rpBarrierPatch("x")), "only to {")
	})

	t.Run("namespaced: a Role per namespace, no cluster-wide right", func(t *testing.T) {
		// Reinstalled as for operator.rotationRestarts.namespaces=[ns-a]: the ClusterRole's
		// binding goes, the Role and its binding in ns-a come.
		rpMust(t, admin.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: kit.ChartRestartsName}}))
		rpMust(t, admin.Delete(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: kit.ChartRestartsName}}))
		nsrc := kit.ChartMustRender(t, kit.ChartNS, "--set", "provisioner.enabled=false", "--set", "operator.rotationRestarts.enabled=true",
			"--set-json", `operator.rotationRestarts.namespaces=["ns-a"]`)
		var restartRBAC kit.ChartObjects
		for _, o := range nsrc {
			if o.Name == kit.ChartRestartsName && strings.HasPrefix(o.Kind, "Role") {
				restartRBAC = append(restartRBAC, o)
			}
		}
		if len(restartRBAC) != 2 || nsrc.Has("ClusterRole", kit.ChartRestartsName) {
			t.Fatalf("namespaced render: restart RBAC %v, all %v", restartRBAC.Names(), nsrc.Names())
		}
		rpInstall(t, admin, restartRBAC)
		m := 10
		kit.WaitDenied(t, "the operator setting the barrier in ns-b", `cannot patch resource "deployments" in API group "apps" in the namespace "ns-b"`, func() error {
			m++
			return rpPatch(ctx, op, rpRef("Deployment", "ns-b", "web"), merge, rpBarrierPatch(barrier(m)))
		})
		deadline := time.Now().Add(30 * time.Second)
		for {
			m++
			err := rpPatch(ctx, op, rpRef("Deployment", "ns-a", "web"), merge, rpBarrierPatch(barrier(m)))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the operator setting the barrier in ns-a under its Role: %v", err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		deny("the operator changing replicas in ns-a", rpPatch(ctx, op, rpRef("Deployment", "ns-a", "web"), merge, `{"spec":{"replicas":3}}`),
			"also changes spec.replicas")
		if err := op.List(ctx, &appsv1.DeploymentList{}); !apierrors.IsForbidden(err) {
			t.Errorf("the operator listing Deployments cluster-wide: %v, want forbidden", err)
		}
		if err := op.List(ctx, &appsv1.DeploymentList{}, client.InNamespace("ns-a")); err != nil {
			t.Errorf("the operator listing Deployments in ns-a: %v", err)
		}
		if err := op.List(ctx, &corev1.PodList{}, client.InNamespace("ns-b")); !apierrors.IsForbidden(err) {
			t.Errorf("the operator listing pods in ns-b: %v, want forbidden", err)
		}
		asOp := "system:serviceaccount:" + kit.ChartNS + ":brewlet-operator"
		for _, q := range []struct {
			args []string
			want string
		}{
			{[]string{"patch", "deployments.apps", "--all-namespaces"}, "no"},
			{[]string{"patch", "statefulsets.apps", "-n", "ns-b"}, "no"},
			{[]string{"patch", "daemonsets.apps", "-n", "kube-system"}, "no"},
			{[]string{"patch", "daemonsets.apps", "-n", "ns-a"}, "yes"},
			{[]string{"watch", "pods", "-n", "ns-a"}, "yes"},
		} {
			if got := cp.CanI(t, asOp, q.args...); got != q.want {
				t.Errorf("operator can-i %v: %q, want %q", q.args, got, q.want)
			}
		}
	})
}

// rpInstall creates the chart's operator RBAC and admission policies of rc (service
// account, roles, bindings, policies; nothing else of the chart) as the admin.
func rpInstall(t *testing.T, admin client.Client, rc kit.ChartObjects) {
	t.Helper()
	kinds := map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
	for _, o := range rc {
		if !kinds[o.Kind] {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(o.JSON); err != nil {
			t.Fatal(err)
		}
		if err := admin.Create(context.Background(), u); err != nil {
			t.Fatalf("create %s %s/%s: %v", o.Kind, o.Namespace, o.Name, err)
		}
	}
}

func rpMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// rpBarrier is a barrier value as the operator writes it.
func rpBarrier(epoch types.UID, generation int) string {
	return fmt.Sprintf(`{"id":"python","epoch":"%s","generation":%d}`, epoch, generation)
}

// rpReached is the generation the test's RuntimeImage has reached: above every barrier the
// test sets while it waits for RBAC and the policy to take effect.
const rpReached = 1000

// rpBarrierPatch is the operator's patch body setting the barrier to value.
func rpBarrierPatch(value string) string {
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{vocab.AnnotationRotatedToGeneration: value}}}}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func rpPatch(ctx context.Context, c client.Client, obj client.Object, pt types.PatchType, body string) error {
	return c.Patch(ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(pt, []byte(body)))
}

// rpRef is an empty workload object of kind, for patches and deletes by name.
func rpRef(kind, ns, name string) client.Object {
	meta := metav1.ObjectMeta{Namespace: ns, Name: name}
	switch kind {
	case "StatefulSet":
		return &appsv1.StatefulSet{ObjectMeta: meta}
	case "DaemonSet":
		return &appsv1.DaemonSet{ObjectMeta: meta}
	default:
		return &appsv1.Deployment{ObjectMeta: meta}
	}
}

// rpMeta is a workload's metadata, with the opt-in annotation when optIn.
func rpMeta(ns, name string, optIn bool) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}}
	if optIn {
		m.Annotations = map[string]string{vocab.AnnotationRestartOnRotation: "true"}
	}
	return m
}

func rpTemplate(name string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}, Annotations: map[string]string{vocab.AnnotationRuntimeImage: "python"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app@" + kit.GoodDigest}}},
	}
}

func rpDeployment(ns, name string, optIn bool) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: rpMeta(ns, name, optIn), Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: rpTemplate(name)}}
}

func rpStatefulSet(ns, name string, optIn bool) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: rpMeta(ns, name, optIn), Spec: appsv1.StatefulSetSpec{ServiceName: name,
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: rpTemplate(name)}}
}

func rpDaemonSet(ns, name string, optIn bool) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: rpMeta(ns, name, optIn), Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: rpTemplate(name)}}
}
