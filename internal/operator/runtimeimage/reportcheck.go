package runtimeimage

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/rollout"
)

// A node's report is hostile input: one node must not be able to make the RuntimeImage's
// status unwritable for the whole fleet (a missing required field, an oversized string).
// What the operator copies from a report into the RuntimeImage is checked here first; what
// fails is left out and counted, affecting that node's own entry only.

// maxUIDLength bounds a UID field.
const maxUIDLength = rollout.MaxUIDLength

// usableReport says whether a node's report can be listed at all: it names when it was
// observed and its node UID is a plausible UID.
func usableReport(r *brewletv1.NodeRuntime) bool { return rollout.UnusableReport(r) == "" }

// usableTask says whether a reported container can be copied: names as Kubernetes allows
// them, UIDs of a bounded length.
func usableTask(t brewletv1.NodeTask) bool {
	return len(validation.IsDNS1123Label(t.PodNamespace)) == 0 &&
		len(validation.IsDNS1123Subdomain(t.PodName)) == 0 &&
		len(validation.IsDNS1123Label(t.ContainerName)) == 0 &&
		t.PodUID != "" && len(t.PodUID) <= maxUIDLength &&
		len(t.Epoch) <= maxUIDLength
}

// boundedUID is a reported node UID as the status may carry it: empty when malformed.
func boundedUID(u types.UID) types.UID {
	if len(u) > maxUIDLength {
		return ""
	}
	return u
}
