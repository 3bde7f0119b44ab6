package controlplane

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/kit"
)

// With the operator confined to one namespace (the chart's rotationRestarts.namespaces and
// the matching flag), a rotation restarts a DaemonSet and a rolling StatefulSet there through
// the real controllers, defers a partitioned StatefulSet naming its partition, and never
// touches an opted-in Deployment of another namespace, where the operator holds no rights.
func TestRotationRestartsWorkloadKinds(t *testing.T) {
	const outside = "other-apps"
	w := startRestartWorldWith(t, 3, 10*time.Minute,
		[]string{"--set-json", `operator.rotationRestarts.namespaces=["` + restartNS + `"]`},
		"--rotation-restart-namespaces="+restartNS)
	ctx, c := context.Background(), w.cp.Client
	epoch := w.approve(t)
	kit.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: outside}}))

	optIn := map[string]string{vocab.AnnotationRestartOnRotation: "true"}
	template := func(app string) corev1.PodTemplateSpec {
		tpl := restartDeployment(app, false).Spec.Template
		tpl.Labels = map[string]string{"app": app}
		return tpl
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ds", Namespace: restartNS, Annotations: optIn},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ds"}},
			Template: template("ds"), MinReadySeconds: 2}}
	sts := func(name string, partition int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: restartNS, Annotations: optIn},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: name,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(partition)}},
				Template: template(name)}}
	}
	outsider := restartDeployment("outsider", true)
	outsider.Namespace = outside
	for _, o := range []client.Object{ds, sts("sts", 0), sts("sts-part", 1), outsider} {
		kit.Must(t, c.Create(ctx, o))
	}
	w.waitRunning(t, 4) // ds on both nodes, one pod per StatefulSet
	before := &appsv1.Deployment{}
	kit.Must(t, c.Get(ctx, client.ObjectKeyFromObject(outsider), before))
	w.report(t, 1, epoch)

	w.rotate(t, 2, 2)
	want := "DaemonSet/ds=Succeeded StatefulSet/sts=Succeeded StatefulSet/sts-part=Deferred"
	w.follow(t, func() { w.reportState(t, 2, epoch, vocab.StateReady) }, want)

	got := getRI(t, c, "python")
	for _, r := range got.Status.Rotation.Restarts {
		if r.Name == "sts-part" && !strings.Contains(r.Message, "partitioned at 1") {
			t.Errorf("the partitioned StatefulSet's record does not name its partition: %+v", r)
		}
		if r.Namespace == outside {
			t.Errorf("a workload outside the operator's namespaces has a record: %+v", r)
		}
	}
	// The restarted pods were made from the barrier's template, by the real controllers.
	pods := &corev1.PodList{}
	kit.Must(t, c.List(ctx, pods, client.InNamespace(restartNS)))
	var fresh []string
	for _, p := range pods.Items {
		if p.Annotations[vocab.AnnotationRotatedToGeneration] != "" {
			fresh = append(fresh, p.Labels["app"])
		}
	}
	sort.Strings(fresh)
	if strings.Join(fresh, ",") != "ds,ds,sts" {
		t.Errorf("pods started on the restarted templates: %v, want both ds pods and sts's", fresh)
	}
	after := &appsv1.Deployment{}
	kit.Must(t, c.Get(ctx, client.ObjectKeyFromObject(outsider), after))
	if after.Generation != before.Generation || after.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration] != "" {
		t.Errorf("the Deployment outside the operator's namespaces was patched: generation %d -> %d", before.Generation, after.Generation)
	}
	asOp := "system:serviceaccount:" + kit.ChartNS + ":brewlet-operator"
	for ns, want := range map[string]string{outside: "no", restartNS: "yes"} {
		if got := w.cp.CanI(t, asOp, "patch", "deployments.apps", "-n", ns); got != want {
			t.Errorf("the namespaced operator may patch Deployments in %s: %s, want %s", ns, got, want)
		}
	}
}
