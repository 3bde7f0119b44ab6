package runtimeimage

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/rollout"
	"brewlet.sh/brewlet/internal/vocab"
)

// maxExcludedNodes bounds status.rotation.excludedNodes (the count is always exact).
const maxExcludedNodes = 20

// rotation recomputes st.rotation and the RotationProgressing and RotationComplete
// conditions from the nodes' reports for the current epoch. maxFailures is the smallest
// rollout.maxFailures of the profiles offering the ID: the same budget past which the
// NodeProfile controller lets no further node have the target (rollout.Halted).
//
// A node counts when it reports the ID in this epoch (Revoked entries do not: the node
// withdrew it). Nodes held back by a wave are neither current nor failed: the rotation is
// still progressing. The rotation is complete when every reporting node serves the target
// except nodes that failed it within the failure budget: those are excluded (they keep
// serving their generation and are listed), and waiting on them would hold every workload's
// restart back for nodes that will never install this digest. RotationComplete is sticky
// per target: rotationCompletedAt is set the first time that holds and kept until the next
// target, so a node joining later does not "un-complete" a finished rotation.
func rotation(ri *brewletv1.RuntimeImage, st *brewletv1.RuntimeImageStatus, reports []brewletv1.NodeRuntime, maxFailures int, now metav1.Time) {
	if st.Generation < 1 || st.Epoch != ri.UID {
		return
	}
	rot := st.Rotation.DeepCopy()
	if rot == nil || rot.Target.Generation != st.Generation || rot.Target.Digest != st.Digest {
		// A new target: the restart records (owned by rotation restarts, otherwise kept as
		// read) were about the previous one; none of them holds a slot any more.
		rot = &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: st.Generation, Digest: st.Digest, AssignedAt: now}}
	}
	var counts brewletv1.RotationNodeCounts
	var excluded []brewletv1.ExcludedNode
	reporting := 0
	for i := range reports {
		for _, e := range reports[i].Status.Runtimes {
			if e.ID != ri.Name || e.Epoch != ri.UID || e.State == string(vocab.StateRevoked) {
				continue
			}
			reporting++
			switch rollout.PhaseOf(rollout.Target{Epoch: ri.UID, Generation: st.Generation}, rollout.Node{Report: &e}) {
			case rollout.PhaseCurrent:
				counts.Current++
			case rollout.PhaseInstalling:
				counts.Installing++
			case rollout.PhaseFailed:
				counts.Failed++
				reason := e.Reason
				if reason == "" {
					reason = string(vocab.StateFailed)
				}
				excluded = append(excluded, brewletv1.ExcludedNode{Name: reports[i].Name, UID: reports[i].Status.NodeUID, Reason: reason, Generation: e.Generation})
			}
		}
	}
	slices.SortFunc(excluded, func(a, b brewletv1.ExcludedNode) int { return strings.Compare(a.Name, b.Name) })
	counts.Excluded = int32(len(excluded))
	rot.Nodes = counts
	rot.ExcludedNodes = excluded
	if len(excluded) > maxExcludedNodes {
		rot.ExcludedNodes = excluded[:maxExcludedNodes]
	}
	halted := rollout.Halted(int(counts.Failed), rollout.Policy{MaxFailures: maxFailures})
	done := !halted && counts.Current > 0 && int(counts.Current+counts.Failed) == reporting
	if done && rot.RotationCompletedAt == nil {
		t := now
		rot.RotationCompletedAt = &t
	}
	st.Rotation = rot

	g := st.Generation
	prog := metav1.Condition{Type: string(vocab.ConditionRotationProgressing), ObservedGeneration: ri.Generation, LastTransitionTime: now}
	switch {
	case reporting == 0:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(vocab.ReasonNoNodes)
		prog.Message = fmt.Sprintf("no node reports %s yet; generation %d is the target", ri.Name, g)
	case halted:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(vocab.ReasonRotationHalted)
		prog.Message = fmt.Sprintf("%d node(s) failed generation %d, more than rollout.maxFailures=%d: no further node installs it, the others keep their generation; a new digest resumes. Failing: %s",
			counts.Failed, g, maxFailures, failing(excluded, rot.ExcludedNodes))
	case done && counts.Failed > 0:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(vocab.ReasonCompleteWithExclusions)
		prog.Message = fmt.Sprintf("%d of %d node(s) serve generation %d; %d excluded after failing it, within rollout.maxFailures=%d (they keep their generation until a new digest): %s",
			counts.Current, reporting, g, counts.Failed, maxFailures, failing(excluded, rot.ExcludedNodes))
	case done:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(vocab.ReasonAllNodesCurrent)
		prog.Message = fmt.Sprintf("all %d node(s) serve generation %d", reporting, g)
	default:
		prog.Status, prog.Reason = metav1.ConditionTrue, string(vocab.ReasonRotating)
		prog.Message = fmt.Sprintf("%d of %d node(s) serve generation %d; %d installing, %d failed", counts.Current, reporting, g, counts.Installing, counts.Failed)
	}
	meta.SetStatusCondition(&st.Conditions, prog)

	comp := metav1.Condition{Type: string(vocab.ConditionRotationComplete), ObservedGeneration: ri.Generation, LastTransitionTime: now}
	switch {
	case rot.RotationCompletedAt != nil:
		comp.Status, comp.Reason = metav1.ConditionTrue, string(vocab.ReasonAllNodesCurrent)
		comp.Message = fmt.Sprintf("generation %d (%s) reached every reporting node at %s", g, st.Digest, rot.RotationCompletedAt.UTC().Format("2006-01-02T15:04:05Z"))
		if counts.Failed > 0 {
			comp.Reason = string(vocab.ReasonCompleteWithExclusions)
			comp.Message = fmt.Sprintf("generation %d (%s) reached every reporting node at %s, except %d excluded after failing it: %s", g, st.Digest,
				rot.RotationCompletedAt.UTC().Format("2006-01-02T15:04:05Z"), counts.Failed, failing(excluded, rot.ExcludedNodes))
		}
	default:
		comp.Status, comp.Reason, comp.Message = metav1.ConditionFalse, prog.Reason, prog.Message
		if prog.Reason == string(vocab.ReasonAllNodesCurrent) {
			comp.Reason = string(vocab.ReasonRotating) // unreachable: done sets the time
		}
	}
	meta.SetStatusCondition(&st.Conditions, comp)
}

// failing names the excluded nodes with their reasons ("a: Reason; b: Reason; and 3 more").
func failing(all, listed []brewletv1.ExcludedNode) string {
	var why []string
	for _, x := range listed {
		why = append(why, x.Name+": "+x.Reason)
	}
	if len(all) > len(listed) {
		why = append(why, fmt.Sprintf("and %d more", len(all)-len(listed)))
	}
	return strings.Join(why, "; ")
}

// nameMissingAgents adds to an unfinished rotation's messages the nodes of the offering
// profiles whose agent does not run and report (from their status.nodesWithoutAgent): they
// are why the rotation may not move, and nothing else in the RuntimeImage names them.
func nameMissingAgents(st *brewletv1.RuntimeImageStatus, missing []string) {
	if len(missing) == 0 {
		return
	}
	note := "; nodes without a running agent: " + strings.Join(missing, "; ")
	for _, t := range []vocab.ConditionType{vocab.ConditionRotationProgressing, vocab.ConditionRotationComplete} {
		if c := meta.FindStatusCondition(st.Conditions, string(t)); c != nil && c.Reason != string(vocab.ReasonAllNodesCurrent) &&
			c.Reason != string(vocab.ReasonCompleteWithExclusions) {
			c.Message += note
		}
	}
}
