package nodereports

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

// IndexRuntimeID indexes NodeRuntimes by the runtime IDs their status reports (installed or
// running containers), so a pass reads only the nodes that report its ID, from the
// informer cache.
const IndexRuntimeID = "status.runtimes.id"

// RuntimeIDs is the index function of IndexRuntimeID.
func RuntimeIDs(o client.Object) []string {
	nrt, ok := o.(*brewletv1.NodeRuntime)
	if !ok {
		return nil
	}
	ids := make([]string, 0, len(nrt.Status.Runtimes))
	for _, e := range nrt.Status.Runtimes {
		ids = append(ids, e.ID)
	}
	for _, t := range nrt.Status.Tasks {
		if !slices.Contains(ids, t.ID) {
			ids = append(ids, t.ID)
		}
	}
	return ids
}

// Requests maps a NodeRuntime to the RuntimeImages it reports. controller-runtime maps
// both the old and the new object of an update, so an entry a node drops still wakes its
// RuntimeImage (the finalizer waits for exactly that).
func Requests(_ context.Context, o client.Object) []reconcile.Request {
	ids := RuntimeIDs(o)
	out := make([]reconcile.Request, 0, len(ids))
	for _, id := range ids {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: id}})
	}
	return out
}

// ProblemSummary names the nodes of problems with their reasons ("n1 (AgentPodPending), …"),
// at most five, and how many more there are of total.
func ProblemSummary(problems []brewletv1.NodeAgentProblem, total int32) string {
	var parts []string
	for _, pr := range problems[:min(len(problems), 5)] {
		parts = append(parts, fmt.Sprintf("%s (%s)", pr.NodeName, pr.Reason))
	}
	if more := int(total) - len(parts); more > 0 {
		parts = append(parts, fmt.Sprintf("%d more", more))
	}
	return strings.Join(parts, ", ")
}
