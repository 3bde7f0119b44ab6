package runtimeimage

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// Bounds of status.taskObservations (also the CRD's maxItems): a fleet of thousands of
// nodes, each running hundreds of old containers, never makes an oversized object. What is
// left out is counted (omittedNodes, omitted).
const (
	MaxObservedNodes   = 50
	MaxBindingsPerNode = 20
)

// observeTasks fills st.TaskObservations, st.OmittedNodes and the OldGenerationTasks
// condition: per node, the containers of this runtime ID that run a generation older than
// st.Generation (but the generation a rollback to it serves again: the same bytes) or a
// previous epoch, as the node last reported them. A node whose report is
// incomplete or whose agent's heartbeat is not fresh keeps its last bindings, marked
// current=false: a silent node is never assumed to have stopped them. observedAt is the
// time of the node's report (not of its heartbeat), so heartbeats alone never rewrite the
// RuntimeImage.
func observeTasks(ri *brewletv1.RuntimeImage, st *brewletv1.RuntimeImageStatus, reports []brewletv1.NodeRuntime, fresh func(node string) bool, now metav1.Time) {
	if st.Generation < 1 || st.Epoch != ri.UID {
		return
	}
	var all []brewletv1.TaskObservation
	stale, containers, unusable := 0, 0, 0
	byGeneration := map[int64]int{}
	otherEpoch := 0
	for i := range reports {
		r := &reports[i]
		var bindings []brewletv1.TaskBinding
		malformed := int32(0)
		for _, t := range r.Status.Tasks {
			if t.ID != ri.Name || (t.Epoch == ri.UID && (t.Generation >= st.Generation || st.SameBytes(t.Generation))) {
				continue
			}
			if !usableTask(t) {
				malformed++
				continue
			}
			bindings = append(bindings, brewletv1.TaskBinding{PodNamespace: t.PodNamespace, PodName: t.PodName,
				PodUID: t.PodUID, ContainerName: t.ContainerName, Epoch: t.Epoch, Generation: t.Generation})
			if t.Epoch == ri.UID {
				byGeneration[t.Generation]++
			} else {
				otherEpoch++
			}
		}
		if len(bindings) == 0 && malformed == 0 {
			continue
		}
		if !usableReport(r) {
			// Not listed: the entry could not be written. Its containers are not counted either
			// (the report cannot say when it saw them); the message names such nodes.
			unusable++
			continue
		}
		containers += len(bindings)
		o := brewletv1.TaskObservation{NodeName: r.Name, NodeUID: r.Status.NodeUID,
			Current: r.Status.Complete && fresh(r.Name)}
		if r.Status.ObservedAt != nil {
			o.ObservedAt = *r.Status.ObservedAt
		}
		if !o.Current {
			stale++
		}
		sort.Slice(bindings, func(a, b int) bool {
			x, y := bindings[a], bindings[b]
			return x.PodNamespace+"/"+x.PodName+"/"+x.ContainerName < y.PodNamespace+"/"+y.PodName+"/"+y.ContainerName
		})
		o.Omitted = malformed
		if len(bindings) > MaxBindingsPerNode {
			o.Omitted += int32(len(bindings) - MaxBindingsPerNode)
			bindings = bindings[:MaxBindingsPerNode]
		}
		o.Bindings = bindings
		all = append(all, o)
	}
	slices.SortFunc(all, func(a, b brewletv1.TaskObservation) int { return strings.Compare(a.NodeName, b.NodeName) })
	st.OmittedNodes = 0
	if len(all) > MaxObservedNodes {
		st.OmittedNodes = int32(len(all) - MaxObservedNodes)
		all = all[:MaxObservedNodes]
	}
	st.TaskObservations = all

	c := metav1.Condition{Type: string(vocab.ConditionOldGenerationTasks), ObservedGeneration: ri.Generation, LastTransitionTime: now}
	if containers == 0 {
		c.Status, c.Reason = metav1.ConditionFalse, string(vocab.ReasonNoOldGenerationTasks)
		c.Message = fmt.Sprintf("every reported container of %s runs generation %d", ri.Name, st.Generation)
	} else {
		c.Status, c.Reason = metav1.ConditionTrue, string(vocab.ReasonOldGenerationTasks)
		c.Message = oldTasksMessage(byGeneration, otherEpoch, containers, len(all)+int(st.OmittedNodes), stale)
	}
	if unusable > 0 {
		c.Message += fmt.Sprintf("; %s sent a report that cannot be used (no observedAt, or a malformed node UID): see their NodeRuntime status and brewlet-provisioner logs", plural(unusable, "node"))
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// oldTasksMessage summarizes old containers for humans: "3 containers on generation 1 on 2
// nodes; 1 node not reporting (its last report is shown)".
func oldTasksMessage(byGeneration map[int64]int, otherEpoch, containers, nodes, stale int) string {
	gens := make([]int64, 0, len(byGeneration))
	for g := range byGeneration {
		gens = append(gens, g)
	}
	slices.Sort(gens)
	var parts []string
	for _, g := range gens {
		parts = append(parts, fmt.Sprintf("%d on generation %d", byGeneration[g], g))
	}
	if otherEpoch > 0 {
		parts = append(parts, fmt.Sprintf("%d of a previous epoch", otherEpoch))
	}
	msg := fmt.Sprintf("%s (%s) on %s", plural(containers, "container"), strings.Join(parts, ", "), plural(nodes, "node"))
	if stale > 0 {
		msg += fmt.Sprintf("; %s not reporting (the last report is shown)", plural(stale, "node"))
	}
	return msg + "; restart them to move them to the current generation"
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
