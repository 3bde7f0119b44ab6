package admission

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// MaxAvoidedNodes bounds the node names one pod's affinity carries: a rotation that left
// more nodes behind than this has halted long before (rollout.maxFailures), and a pod spec
// must stay small.
const MaxAvoidedNodes = 500

// avoidExcludedNodes keeps a pod that a rotation restart created (its barrier names the
// RuntimeImage's epoch) off the nodes that rotation left behind
// (status.rotation.excludedNodes): a stuck node whose agent is silent would refuse the pod
// at start (its generation is older than the barrier, or its authorization has expired),
// and a restart exists to move pods onto nodes that serve the target. The names are
// ANDed into every required term, one `metadata.name NotIn` each (after requireRuntimeLabel,
// which leaves at least one term).
// The requirement is fixed at admission: a node that rejoins later receives the
// workload's next pods, not these.
//
// Pods pinned to one node (spec.nodeName, or a term selecting metadata.name In, as the
// DaemonSet controller makes them) are left alone: for them the node is not a choice, and
// the requirement would keep them pending even after the node rejoined.
func avoidExcludedNodes(pod *corev1.Pod, ri *brewletv1.RuntimeImage) {
	b, ok := brewletv1.ParseRotationBarrier(pod.Annotations[vocab.AnnotationRotatedToGeneration])
	rot := ri.Status.Rotation
	if !ok || b.ID != ri.Name || b.Epoch != ri.UID || rot == nil || len(rot.ExcludedNodes) == 0 || pinned(pod) {
		return
	}
	var names []string
	for _, e := range rot.ExcludedNodes {
		if e.Name != "" && !slices.Contains(names, e.Name) && len(names) < MaxAvoidedNodes {
			names = append(names, e.Name)
		}
	}
	slices.Sort(names)
	// One requirement per node: the API server accepts a single value in a metadata.name
	// field requirement (a list of two made every restarted pod invalid, 422).
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for _, n := range names {
		andIntoEveryTerm(terms, corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{n}}, true)
	}
}

// pinned reports whether the pod can run on one node only.
func pinned(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" {
		return true
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, r := range t.MatchFields {
			if r.Key == "metadata.name" && r.Operator == corev1.NodeSelectorOpIn {
				return true
			}
		}
	}
	return false
}
