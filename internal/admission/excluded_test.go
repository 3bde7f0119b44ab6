package admission

import (
	"reflect"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

func TestAdmitKeepsRestartedPodsOffExcludedNodes(t *testing.T) {
	ri := approvedRI("python-3.12")
	ri.Status.Rotation = &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: 3},
		ExcludedNodes: []brewletv1.ExcludedNode{{Name: "stuck-b", Reason: string(vocab.ReasonAgentNotReporting)},
			{Name: "failed-a", Reason: "LayerRefused"}, {Name: "stuck-b", Reason: string(vocab.ReasonNodeTimedOut)}}}
	barrier := func(id string, epoch string, gen int64) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Annotations[vocab.AnnotationRotatedToGeneration] = brewletv1.RotationBarrier{ID: id, Epoch: types.UID(epoch), Generation: gen}.String()
		}
	}
	avoidA := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"failed-a"}}
	avoidB := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"stuck-b"}}
	pin := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"stuck-b"}}
	noRotation := approvedRI("python-3.12")
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		ri   *brewletv1.RuntimeImage
		want []corev1.NodeSelectorTerm
	}{
		{"restarted pod of this epoch", brewletPod(barrier("python-3.12", "uid-1", 3)), ri,
			[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}, MatchFields: []corev1.NodeSelectorRequirement{avoidA, avoidB}}}},
		{"an earlier restart of this epoch", brewletPod(barrier("python-3.12", "uid-1", 2)), ri,
			[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}, MatchFields: []corev1.NodeSelectorRequirement{avoidA, avoidB}}}},
		{"no barrier", brewletPod(), ri, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}}}},
		{"barrier of another epoch", brewletPod(barrier("python-3.12", "uid-0", 3)), ri,
			[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}}}},
		{"barrier of another ID", brewletPod(barrier("java", "uid-1", 3)), ri,
			[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}}}},
		{"unreadable barrier", brewletPod(func(p *corev1.Pod) { p.Annotations[vocab.AnnotationRotatedToGeneration] = "{" }), ri,
			[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}}}},
		{"nothing excluded", brewletPod(barrier("python-3.12", "uid-1", 3)), noRotation,
			[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}}}},
		{"a DaemonSet's pod stays pinned", brewletPod(barrier("python-3.12", "uid-1", 3), func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{pin}}}}}}
		}), ri, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}, MatchFields: []corev1.NodeSelectorRequirement{pin}}}},
		{"a pod bound by name stays", brewletPod(barrier("python-3.12", "uid-1", 3), func(p *corev1.Pod) { p.Spec.NodeName = "stuck-b" }), ri,
			[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Admit(tc.pod, tc.ri, testPools)
			if !d.Allowed() {
				t.Fatal(d.Message())
			}
			got := d.Pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("terms\n got %+v\nwant %+v", got, tc.want)
			}
			if again := Admit(d.Pod, tc.ri, testPools); !reflect.DeepEqual(again.Pod, d.Pod) {
				t.Fatal("second admission changed the pod")
			}
		})
	}
}

func TestAvoidExcludedNodesIsBounded(t *testing.T) {
	ri := approvedRI("python-3.12")
	ri.Status.Rotation = &brewletv1.RotationStatus{}
	for i := range MaxAvoidedNodes + 50 {
		ri.Status.Rotation.ExcludedNodes = append(ri.Status.Rotation.ExcludedNodes, brewletv1.ExcludedNode{Name: "node-" + strconv.Itoa(i)})
	}
	pod := brewletPod(func(p *corev1.Pod) {
		p.Annotations[vocab.AnnotationRotatedToGeneration] = brewletv1.RotationBarrier{ID: "python-3.12", Epoch: "uid-1", Generation: 1}.String()
	})
	d := Admit(pod, ri, testPools)
	got := d.Pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields
	if len(got) != MaxAvoidedNodes {
		t.Fatalf("matchFields %d requirements; want %d", len(got), MaxAvoidedNodes)
	}
	for _, r := range got {
		if len(r.Values) != 1 {
			t.Fatalf("requirement %+v: the API server accepts one value per metadata.name requirement", r)
		}
	}
}
