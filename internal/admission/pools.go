package admission

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// MaxNodeSelectorTerms bounds the required node affinity requireOfferingPool leaves: pools
// under several keys multiply the pod's terms.
const MaxNodeSelectorTerms = 64

// requireOfferingPool makes every required nodeSelectorTerm also require a pool that offers
// the runtime (called after requireRuntimeLabel, so the pod has at least one term). Pools
// under one key are one requirement, "key In [names]", ANDed into every term. Pools under
// several keys are alternatives: each term becomes one term per key, so the pod still needs
// its own term and one of the pools. A term that already holds one of these requirements
// was expanded by an earlier admission and is kept as it is (admission is idempotent).
func requireOfferingPool(pod *corev1.Pod, pools map[string][]string) {
	reqs := poolRequirements(pools)
	ns := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(reqs) == 1 {
		andIntoEveryTerm(ns.NodeSelectorTerms, reqs[0], false)
		return
	}
	var out []corev1.NodeSelectorTerm
	for _, term := range ns.NodeSelectorTerms {
		if hasAny(term, reqs) {
			out = append(out, term)
			continue
		}
		for _, r := range reqs {
			t := *term.DeepCopy()
			t.MatchExpressions = append(t.MatchExpressions, *r.DeepCopy())
			out = append(out, t)
		}
	}
	ns.NodeSelectorTerms = out
}

// offeredTerms is how many required terms requireOfferingPool would leave.
func offeredTerms(pod *corev1.Pod, pools map[string][]string) int {
	terms := 1
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		terms = max(1, len(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms))
	}
	if len(pools) <= 1 {
		return terms
	}
	return terms * len(pools)
}

// poolRequirements is one "key In [names]" per pool key, in key order.
func poolRequirements(pools map[string][]string) []corev1.NodeSelectorRequirement {
	keys := make([]string, 0, len(pools))
	for k := range pools {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]corev1.NodeSelectorRequirement, 0, len(keys))
	for _, k := range keys {
		out = append(out, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: slices.Clone(pools[k])})
	}
	return out
}

func hasAny(term corev1.NodeSelectorTerm, reqs []corev1.NodeSelectorRequirement) bool {
	return slices.ContainsFunc(term.MatchExpressions, func(e corev1.NodeSelectorRequirement) bool {
		return slices.ContainsFunc(reqs, func(r corev1.NodeSelectorRequirement) bool {
			return e.Key == r.Key && e.Operator == r.Operator && slices.Equal(e.Values, r.Values)
		})
	})
}
