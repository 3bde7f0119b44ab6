package admission

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

// A Brewlet pod goes only to the pools whose NodeProfiles offer its runtime: pool labels
// are the one thing no node's own identity can write, so no label its kubelet or agent sets
// widens where the pod may run.
func TestAdmitRequiresAnOfferingPool(t *testing.T) {
	zone := corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	arch := corev1.NodeSelectorRequirement{Key: "arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}
	team := corev1.NodeSelectorRequirement{Key: "node-restriction.kubernetes.io/team", Operator: corev1.NodeSelectorOpIn, Values: []string{"ml"}}
	general := corev1.NodeSelectorRequirement{Key: "node-restriction.kubernetes.io/pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"batch", "general"}}
	twoKeys := map[string][]string{"node-restriction.kubernetes.io/pool": {"batch", "general"}, "node-restriction.kubernetes.io/team": {"ml"}}
	terms := func(ts ...corev1.NodeSelectorTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: ts}}}
		}
	}
	expr := func(rs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: rs}
	}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		pools map[string][]string
		want  []corev1.NodeSelectorTerm
	}{
		{"one key: one requirement in every term", brewletPod(terms(expr(zone), expr(arch))),
			map[string][]string{"node-restriction.kubernetes.io/pool": {"batch", "general"}},
			[]corev1.NodeSelectorTerm{expr(zone, runtimeReq(), general), expr(arch, runtimeReq(), general)}},
		{"two keys: each term once per key", brewletPod(terms(expr(zone), expr(arch))), twoKeys,
			[]corev1.NodeSelectorTerm{expr(zone, runtimeReq(), general), expr(zone, runtimeReq(), team),
				expr(arch, runtimeReq(), general), expr(arch, runtimeReq(), team)}},
		{"two keys, no terms of its own", brewletPod(), twoKeys,
			[]corev1.NodeSelectorTerm{expr(runtimeReq(), general), expr(runtimeReq(), team)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Admit(tc.pod, approvedRI("python-3.12"), tc.pools)
			if !d.Allowed() {
				t.Fatal(d.Message())
			}
			got := d.Pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("terms\n got %+v\nwant %+v", got, tc.want)
			}
			if again := Admit(d.Pod, approvedRI("python-3.12"), tc.pools); !reflect.DeepEqual(again.Pod, d.Pod) {
				t.Fatal("second admission changed the pod")
			}
		})
	}

	for _, pools := range []map[string][]string{nil, {}} {
		d := Admit(brewletPod(), approvedRI("python-3.12"), pools)
		if d.Allowed() || vocab.ReasonOf(d.Denials[0]) != vocab.ReasonRuntimeNotOffered || !strings.Contains(d.Message(), "NodeProfile") {
			t.Errorf("a runtime no pool offers: %v, want RuntimeNotOffered", d.Message())
		}
	}

	many := make([]corev1.NodeSelectorTerm, MaxNodeSelectorTerms/2+1)
	for i := range many {
		many[i] = expr(zone)
	}
	if d := Admit(brewletPod(terms(many...)), approvedRI("python-3.12"), twoKeys); d.Allowed() || vocab.ReasonOf(d.Denials[0]) != vocab.ReasonLimitExceeded {
		t.Errorf("%d terms times 2 pool keys: %v, want LimitExceeded", len(many), d.Message())
	}
}
