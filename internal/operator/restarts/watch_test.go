package restarts

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

func podWith(ns, name string, lbls map[string]string, deleting bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}}
	if deleting {
		p.DeletionTimestamp = &metav1.Time{}
	}
	return p
}

func TestPodGroupsSelected(t *testing.T) {
	g := groupPods([]corev1.Pod{
		podWith("a", "web-1", map[string]string{"app": "web", "tier": "front"}, false),
		podWith("a", "web-2", map[string]string{"app": "web", "tier": "back"}, false),
		podWith("a", "web-gone", map[string]string{"app": "web", "tier": "front"}, true),
		podWith("b", "web-3", map[string]string{"app": "web", "tier": "front"}, false),
		podWith("a", "db-1", map[string]string{"app": "db"}, false),
	})
	for _, tc := range []struct {
		name, ns string
		sel      *metav1.LabelSelector
		want     []string
	}{
		{"matchLabels, own namespace only, deleting pods left out", "a", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, []string{"web-1", "web-2"}},
		{"every matchLabels pair must hold", "a", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "tier": "front"}}, []string{"web-1"}},
		{"expressions only: the namespace's pods are tried", "a", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"db", "web"}}}}, []string{"db-1", "web-1", "web-2"}},
		{"labels and expressions together", "a", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}, MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"front"}}}}, []string{"web-2"}},
		{"empty selector selects nothing", "a", &metav1.LabelSelector{}, nil},
		{"nil selector selects nothing", "a", nil, nil},
		{"invalid selector selects nothing", "a", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}, nil},
		{"no such label", "a", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}}, nil},
		{"unknown namespace", "c", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, p := range g.selected(tc.ns, tc.sel) {
				got = append(got, p.Name)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func update(o, n client.Object) event.UpdateEvent {
	return event.UpdateEvent{ObjectOld: o, ObjectNew: n}
}

func TestPredicatesLetThroughWhatDecideReads(t *testing.T) {
	dep := func(edit func(*appsv1.Deployment)) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Generation: 2, Annotations: map[string]string{vocab.AnnotationRestartOnRotation: "true"}},
			Spec:   appsv1.DeploymentSpec{Replicas: ptr.To[int32](1)},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 1, AvailableReplicas: 1}}
		if edit != nil {
			edit(d)
		}
		return d
	}
	pd := func(edit func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "x"},
			Annotations: map[string]string{vocab.AnnotationRuntimeImage: "python"}}}
		if edit != nil {
			edit(p)
		}
		return p
	}
	ri := func(edit func(*brewletv1.RuntimeImage)) *brewletv1.RuntimeImage {
		r := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "python", UID: epoch}}
		r.Status = brewletv1.RuntimeImageStatus{Epoch: epoch, Generation: 3, Conditions: []metav1.Condition{{Type: string(vocab.ConditionRotationComplete), Status: metav1.ConditionTrue}},
			Rotation: &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: 3}, RotationCompletedAt: &metav1.Time{Time: completed}}}
		if edit != nil {
			edit(r)
		}
		return r
	}
	nr := func(edit func(*brewletv1.NodeRuntime)) *brewletv1.NodeRuntime {
		n := &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n", Generation: 1}}
		if edit != nil {
			edit(n)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		pass bool
		e    event.UpdateEvent
		p    func(event.UpdateEvent) bool
	}{
		{"deployment: status progress only", false, update(dep(nil), dep(func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 2 })), workloadChanged.UpdateFunc},
		{"deployment: rollout finished", true, update(dep(nil), dep(func(d *appsv1.Deployment) { d.Status.Replicas = 1; d.Status.UpdatedReplicas = 1 })), workloadChanged.UpdateFunc},
		{"deployment: spec changed", true, update(dep(nil), dep(func(d *appsv1.Deployment) { d.Generation = 3 })), workloadChanged.UpdateFunc},
		{"deployment: opted out", true, update(dep(nil), dep(func(d *appsv1.Deployment) { d.Annotations = nil })), workloadChanged.UpdateFunc},
		{"deployment: other annotation", false, update(dep(nil), dep(func(d *appsv1.Deployment) { d.Annotations["x"] = "y" })), workloadChanged.UpdateFunc},
		{"deployment: being deleted", true, update(dep(nil), dep(func(d *appsv1.Deployment) { d.DeletionTimestamp = &metav1.Time{} })), workloadChanged.UpdateFunc},
		{"pod: status only", false, update(pd(nil), pd(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning; p.ResourceVersion = "9" })), podChanged.UpdateFunc},
		{"pod: scheduled", true, update(pd(nil), pd(func(p *corev1.Pod) { p.Spec.NodeName = "n" })), podChanged.UpdateFunc},
		{"pod: relabelled", true, update(pd(nil), pd(func(p *corev1.Pod) { p.Labels["app"] = "y" })), podChanged.UpdateFunc},
		{"pod: other runtime", true, update(pd(nil), pd(func(p *corev1.Pod) { p.Annotations[vocab.AnnotationRuntimeImage] = "node" })), podChanged.UpdateFunc},
		{"pod: being deleted", true, update(pd(nil), pd(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} })), podChanged.UpdateFunc},
		{"runtimeimage: restart records (own write)", false, update(ri(nil), ri(func(r *brewletv1.RuntimeImage) {
			r.Status.Rotation.Restarts = []brewletv1.WorkloadRestart{{Name: "d"}}
		})), targetChanged.UpdateFunc},
		{"runtimeimage: node counts", false, update(ri(nil), ri(func(r *brewletv1.RuntimeImage) { r.Status.Rotation.Nodes.Current = 7 })), targetChanged.UpdateFunc},
		{"runtimeimage: next generation", true, update(ri(nil), ri(func(r *brewletv1.RuntimeImage) { r.Status.Generation = 4 })), targetChanged.UpdateFunc},
		{"runtimeimage: rotation completed", true, update(ri(func(r *brewletv1.RuntimeImage) { r.Status.Conditions = nil }), ri(nil)), targetChanged.UpdateFunc},
		{"noderuntime: spec written by the operator", false, update(nr(nil), nr(func(n *brewletv1.NodeRuntime) { n.Generation = 2 })), reportChanged.UpdateFunc},
		{"noderuntime: report changed", true, update(nr(nil), nr(func(n *brewletv1.NodeRuntime) { n.Status.Complete = true })), reportChanged.UpdateFunc},
	} {
		if got := tc.p(tc.e); got != tc.pass {
			t.Errorf("%s: let through %t, want %t", tc.name, got, tc.pass)
		}
	}
}

func TestWaitingForSlot(t *testing.T) {
	withCounts := func(name string, rc *brewletv1.RestartCounts) brewletv1.RuntimeImage {
		ri := brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if rc != nil {
			ri.Status.Rotation = &brewletv1.RotationStatus{RestartCounts: rc}
		}
		return ri
	}
	ris := []brewletv1.RuntimeImage{
		withCounts("python", &brewletv1.RestartCounts{Pending: 3, InProgress: 1}),
		withCounts("node", &brewletv1.RestartCounts{Pending: 2}),
		withCounts("java", &brewletv1.RestartCounts{Succeeded: 9}),
		withCounts("static", nil),
	}
	if got := waitingForSlot("python", ris); !slices.Equal(got, []string{"node"}) {
		t.Errorf("python freed a slot: woke %v, want [node]", got)
	}
	if got := waitingForSlot("java", ris); !slices.Equal(got, []string{"python", "node"}) {
		t.Errorf("java freed a slot: woke %v, want [python node]", got)
	}
	if got := inProgress(&ris[0]); got != 1 {
		t.Errorf("inProgress(python) = %d, want 1", got)
	}
	if got := inProgress(&ris[3]); got != 0 {
		t.Errorf("inProgress without a rotation = %d, want 0", got)
	}
}

func TestWorkloadRuntimeID(t *testing.T) {
	tmpl := func(ann map[string]string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: ann}}
	}
	optIn := map[string]string{vocab.AnnotationRestartOnRotation: "true"}
	runs := map[string]string{vocab.AnnotationRuntimeImage: "python"}
	for _, tc := range []struct {
		name string
		obj  client.Object
		want []string
	}{
		{"opted-in Deployment", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Annotations: optIn}, Spec: appsv1.DeploymentSpec{Template: tmpl(runs)}}, []string{"python"}},
		{"opted-in StatefulSet", &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Annotations: optIn}, Spec: appsv1.StatefulSetSpec{Template: tmpl(runs)}}, []string{"python"}},
		{"opted-in DaemonSet", &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Annotations: optIn}, Spec: appsv1.DaemonSetSpec{Template: tmpl(runs)}}, []string{"python"}},
		{"not opted in", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: tmpl(runs)}}, nil},
		{"opt-in other than true", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{vocab.AnnotationRestartOnRotation: "yes"}}, Spec: appsv1.DeploymentSpec{Template: tmpl(runs)}}, nil},
		{"opt-in on the template only", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: tmpl(map[string]string{vocab.AnnotationRuntimeImage: "python", vocab.AnnotationRestartOnRotation: "true"})}}, nil},
		{"runtime on the object, not the template", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{vocab.AnnotationRestartOnRotation: "true", vocab.AnnotationRuntimeImage: "python"}}}, nil},
		{"a pod is no workload", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{vocab.AnnotationRestartOnRotation: "true", vocab.AnnotationRuntimeImage: "python"}}}, nil},
	} {
		if got := WorkloadRuntimeID(tc.obj); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
