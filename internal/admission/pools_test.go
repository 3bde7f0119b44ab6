package admission

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

// A Brewlet pod goes only where a NodeProfile offering its runtime owns the node, in pool
// labels (the one thing no node's own identity can write): no label its kubelet or agent
// sets widens where the pod may run.
func TestAdmitRequiresAnOfferingPool(t *testing.T) {
	zone := corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	arch := corev1.NodeSelectorRequirement{Key: "arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}
	general := corev1.NodeSelectorRequirement{Key: "node-restriction.kubernetes.io/pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"batch", "general"}}
	team := corev1.NodeSelectorRequirement{Key: "node-restriction.kubernetes.io/team", Operator: corev1.NodeSelectorOpIn, Values: []string{"ml"}}
	notGeneral := corev1.NodeSelectorRequirement{Key: "node-restriction.kubernetes.io/pool", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"batch", "general"}}
	noCP := corev1.NodeSelectorRequirement{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.NodeSelectorOpDoesNotExist}
	one := [][]corev1.NodeSelectorRequirement{{general, noCP}}
	two := [][]corev1.NodeSelectorRequirement{{general, noCP}, {team, notGeneral}}
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
		name       string
		pod        *corev1.Pod
		placements [][]corev1.NodeSelectorRequirement
		want       []corev1.NodeSelectorTerm
	}{
		{"one offering profile: its placement in every term", brewletPod(terms(expr(zone), expr(arch))), one,
			[]corev1.NodeSelectorTerm{expr(zone, runtimeReq(), general, noCP), expr(arch, runtimeReq(), general, noCP)}},
		{"two: each term once per placement", brewletPod(terms(expr(zone), expr(arch))), two,
			[]corev1.NodeSelectorTerm{expr(zone, runtimeReq(), general, noCP), expr(zone, runtimeReq(), team, notGeneral),
				expr(arch, runtimeReq(), general, noCP), expr(arch, runtimeReq(), team, notGeneral)}},
		{"two, no terms of its own", brewletPod(), two,
			[]corev1.NodeSelectorTerm{expr(runtimeReq(), general, noCP), expr(runtimeReq(), team, notGeneral)}},
		{"a requirement the pod already has is not repeated", brewletPod(terms(expr(noCP, zone))), one,
			[]corev1.NodeSelectorTerm{expr(noCP, zone, runtimeReq(), general)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Admit(tc.pod, approvedRI("python-3.12"), tc.placements)
			if !d.Allowed() {
				t.Fatal(d.Message())
			}
			got := d.Pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("terms\n got %+v\nwant %+v", got, tc.want)
			}
			if again := Admit(d.Pod, approvedRI("python-3.12"), tc.placements); !again.Allowed() || !reflect.DeepEqual(again.Pod, d.Pod) {
				t.Fatalf("second admission changed the pod: %s", again.Message())
			}
		})
	}

	for _, none := range [][][]corev1.NodeSelectorRequirement{nil, {}} {
		d := Admit(brewletPod(), approvedRI("python-3.12"), none)
		if d.Allowed() || vocab.ReasonOf(d.Denials[0]) != vocab.ReasonRuntimeNotOffered || !strings.Contains(d.Message(), "NodeProfile") {
			t.Errorf("a runtime no pool offers: %v, want RuntimeNotOffered", d.Message())
		}
	}

	// Bounded: terms times placements. An admitted pod at the bound passes again (its terms
	// are expanded already, not multiplied once more).
	many := make([]corev1.NodeSelectorTerm, MaxNodeSelectorTerms/2)
	for i := range many {
		many[i] = expr(zone)
	}
	d := Admit(brewletPod(terms(many...)), approvedRI("python-3.12"), two)
	if !d.Allowed() {
		t.Fatalf("%d terms times 2 placements: %s", len(many), d.Message())
	}
	if again := Admit(d.Pod, approvedRI("python-3.12"), two); !again.Allowed() || !reflect.DeepEqual(again.Pod, d.Pod) {
		t.Fatalf("the admitted pod at the bound admitted again: %s", again.Message())
	}
	if d := Admit(brewletPod(terms(append(many, expr(arch))...)), approvedRI("python-3.12"), two); d.Allowed() || vocab.ReasonOf(d.Denials[0]) != vocab.ReasonLimitExceeded {
		t.Errorf("%d terms times 2 placements: %v, want LimitExceeded", len(many)+1, d.Message())
	}
}
