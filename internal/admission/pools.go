package admission

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// MaxNodeSelectorTerms bounds the required node affinity requireOfferingPool leaves: several
// offering profiles multiply the pod's terms.
const MaxNodeSelectorTerms = 64

// requireOfferingPool makes every required nodeSelectorTerm also require one of the
// placements that offer the runtime (nodepool.Offering; called after requireRuntimeLabel,
// so the pod has at least one term). Each term becomes one term per placement, its own
// requirements plus the placement's: the pod still needs its own term and now one of the
// pools. A term that already holds every requirement of a placement was expanded by an
// earlier admission and is kept as it is (admission is idempotent).
func requireOfferingPool(pod *corev1.Pod, placements [][]corev1.NodeSelectorRequirement) {
	ns := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	var out []corev1.NodeSelectorTerm
	for _, term := range ns.NodeSelectorTerms {
		if expanded(term, placements) {
			out = append(out, term)
			continue
		}
		for _, p := range placements {
			t := *term.DeepCopy()
			for _, r := range p {
				if !slices.ContainsFunc(t.MatchExpressions, sameRequirement(r)) {
					t.MatchExpressions = append(t.MatchExpressions, *r.DeepCopy())
				}
			}
			out = append(out, t)
		}
	}
	ns.NodeSelectorTerms = out
}

// offeredTerms is how many required terms requireOfferingPool would leave.
func offeredTerms(pod *corev1.Pod, placements [][]corev1.NodeSelectorRequirement) int {
	var terms []corev1.NodeSelectorTerm
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		terms = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	}
	if len(terms) == 0 {
		return len(placements)
	}
	n := 0
	for _, t := range terms {
		if expanded(t, placements) {
			n++
		} else {
			n += len(placements)
		}
	}
	return n
}

// expanded: the term already holds every requirement of one placement.
func expanded(term corev1.NodeSelectorTerm, placements [][]corev1.NodeSelectorRequirement) bool {
	return slices.ContainsFunc(placements, func(p []corev1.NodeSelectorRequirement) bool {
		for _, r := range p {
			if !slices.ContainsFunc(term.MatchExpressions, sameRequirement(r)) {
				return false
			}
		}
		return true
	})
}

func sameRequirement(r corev1.NodeSelectorRequirement) func(corev1.NodeSelectorRequirement) bool {
	return func(e corev1.NodeSelectorRequirement) bool {
		return e.Key == r.Key && e.Operator == r.Operator && slices.Equal(e.Values, r.Values)
	}
}
