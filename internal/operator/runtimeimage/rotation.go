package runtimeimage

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/eventnote"
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
// except excluded ones: nodes that failed it within the failure budget (they keep serving
// their generation), and stuck nodes (rollout.PhaseAt: past the installBy their wave set,
// or with a silent agent). Waiting on either would hold every workload's restart back for
// nodes that may never install this digest; both are listed with why, and a stuck node
// rejoins as soon as it reports the target (it is then simply current). Stuck nodes count
// no failure: a dead agent says nothing about the digest. RotationComplete is sticky
// per target: rotationCompletedAt is set the first time that holds and kept until the next
// target, so a node joining later does not "un-complete" a finished rotation.
//
// It returns the earliest installBy ahead of an installing node (zero: none), when a node
// may time out without any object changing.
func rotation(ri *brewletv1.RuntimeImage, st *brewletv1.RuntimeImageStatus, reports []brewletv1.NodeRuntime, maxFailures int, silent func(node string) bool, fleetPause string, now metav1.Time) (next time.Time, broken map[string]string) {
	if st.Generation < 1 || st.Epoch != ri.UID {
		return next, nil
	}
	rot := st.Rotation.DeepCopy()
	if rot == nil || rot.Target.Generation != st.Generation || rot.Target.Digest != st.Digest {
		// A new target: the restart records (owned by rotation restarts, otherwise kept as
		// read) were about the previous one; none of them holds a slot any more.
		rot = &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: st.Generation, Digest: st.Digest, AssignedAt: now}}
	}
	var counts brewletv1.RotationNodeCounts
	var excluded []brewletv1.ExcludedNode
	stuck := 0
	reporting := 0
	firstFailure := "" // what the first failing node says of the target: why it halts
	target := rollout.Target{Epoch: ri.UID, Generation: st.Generation, Digest: st.Digest, Rollback: st.RollbackInEffect() != nil}
	for i := range reports {
		for _, e := range reports[i].Status.Runtimes {
			if e.ID != ri.Name || e.Epoch != ri.UID || e.State == string(vocab.StateRevoked) {
				continue
			}
			reporting++
			n := rollout.NodeOf(&reports[i], &e, silent)
			switch rollout.PhaseAt(target, n, now.Time) {
			case rollout.PhaseStuck:
				stuck++
				excluded = append(excluded, brewletv1.ExcludedNode{Name: reports[i].Name, UID: boundedUID(reports[i].Status.NodeUID),
					Reason: string(rollout.StuckReason(target, n)), Generation: max(0, min(e.Generation, st.Generation))})
			case rollout.PhaseCurrent:
				counts.Current++
			case rollout.PhaseInstalling:
				counts.Installing++
				next = rollout.Earliest(next, n.InstallBy)
			case rollout.PhaseFailed:
				counts.Failed++
				reason := e.Reason
				if reason == "" {
					reason = string(vocab.StateFailed)
				}
				if firstFailure == "" && e.Message != "" {
					firstFailure = reports[i].Name + " reports: " + boundedMessage(e.Message)
				}
				if e.Reason == string(vocab.ReasonRuntimePromiseBroken) && len(broken) < maxExcludedNodes {
					if broken == nil {
						broken = map[string]string{}
					}
					broken[reports[i].Name] = boundedMessage(e.Message)
				}
				excluded = append(excluded, brewletv1.ExcludedNode{Name: reports[i].Name, UID: boundedUID(reports[i].Status.NodeUID), Reason: reason, Generation: e.Generation})
			}
		}
	}
	slices.SortFunc(excluded, func(a, b brewletv1.ExcludedNode) int { return strings.Compare(a.Name, b.Name) })
	counts.Excluded = int32(len(excluded))
	counts.Stuck = int32(stuck)
	rot.Nodes = counts
	rot.ExcludedNodes = excluded
	if len(excluded) > maxExcludedNodes {
		rot.ExcludedNodes = excluded[:maxExcludedNodes]
	}
	halted := rollout.Halted(int(counts.Failed), int(counts.Current), rollout.Policy{MaxFailures: maxFailures})
	done := !halted && counts.Current > 0 && int(counts.Current+counts.Failed)+stuck == reporting
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
		if firstFailure != "" {
			prog.Message += ". " + firstFailure
		}
	case !done && ri.Spec.Paused && !target.Rollback:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(vocab.ReasonRotationPaused)
		prog.Message = fmt.Sprintf("spec.paused holds the rotation: %d of %d node(s) serve generation %d, no further node is allowed it and no workload restart starts; set spec.paused to false to resume",
			counts.Current, reporting, g)
	case !done && fleetPause != "" && !target.Rollback:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(vocab.ReasonRotationPaused)
		prog.Message = fmt.Sprintf("%d of %d node(s) serve generation %d. %s", counts.Current, reporting, g, fleetPause)
	case done && counts.Excluded > 0:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(vocab.ReasonCompleteWithExclusions)
		prog.Message = fmt.Sprintf("%d of %d node(s) serve generation %d; %d excluded (%s), within rollout.maxFailures=%d for failures: %s",
			counts.Current, reporting, g, counts.Excluded, exclusionKinds(int(counts.Failed), stuck), maxFailures, failing(excluded, rot.ExcludedNodes))
		if firstFailure != "" {
			prog.Message += ". " + firstFailure
		}
	case done:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(vocab.ReasonAllNodesCurrent)
		prog.Message = fmt.Sprintf("all %d node(s) serve generation %d", reporting, g)
	default:
		prog.Status, prog.Reason = metav1.ConditionTrue, string(vocab.ReasonRotating)
		prog.Message = fmt.Sprintf("%d of %d node(s) serve generation %d; %d installing, %d failed", counts.Current, reporting, g, counts.Installing, counts.Failed)
		if rb := st.RollbackInEffect(); rb != nil {
			prog.Message = fmt.Sprintf("rolling back from generation %d to generation %d's digest: ", rb.Bad.Generation, rb.To.Generation) + prog.Message
		}
		if stuck > 0 {
			prog.Message += fmt.Sprintf(", %d excluded as stuck: %s", stuck, failing(excluded, rot.ExcludedNodes))
		}
		if firstFailure != "" {
			prog.Message += ". " + firstFailure
		}
	}
	meta.SetStatusCondition(&st.Conditions, prog)

	comp := metav1.Condition{Type: string(vocab.ConditionRotationComplete), ObservedGeneration: ri.Generation, LastTransitionTime: now}
	switch {
	case rot.RotationCompletedAt != nil:
		comp.Status, comp.Reason = metav1.ConditionTrue, string(vocab.ReasonAllNodesCurrent)
		comp.Message = fmt.Sprintf("generation %d (%s) reached every reporting node at %s", g, st.Digest, rot.RotationCompletedAt.UTC().Format("2006-01-02T15:04:05Z"))
		if counts.Excluded > 0 {
			comp.Reason = string(vocab.ReasonCompleteWithExclusions)
			comp.Message = fmt.Sprintf("generation %d (%s) reached every reporting node at %s, except %d excluded (%s): %s", g, st.Digest,
				rot.RotationCompletedAt.UTC().Format("2006-01-02T15:04:05Z"), counts.Excluded, exclusionKinds(int(counts.Failed), stuck), failing(excluded, rot.ExcludedNodes))
		}
	default:
		comp.Status, comp.Reason, comp.Message = metav1.ConditionFalse, prog.Reason, prog.Message
		if prog.Reason == string(vocab.ReasonAllNodesCurrent) {
			comp.Reason = string(vocab.ReasonRotating) // unreachable: done sets the time
		}
	}
	meta.SetStatusCondition(&st.Conditions, comp)
	return next, broken
}

// exclusionKinds says what the excluded nodes are ("1 failed it, 2 stuck").
func exclusionKinds(failed, stuck int) string {
	var parts []string
	if failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed it and keep their generation until a new digest", failed))
	}
	if stuck > 0 {
		parts = append(parts, fmt.Sprintf("%d stuck, rejoining when they report it", stuck))
	}
	return strings.Join(parts, ", ")
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

// maxFailureMessage bounds a node's failure message quoted in a condition: the node wrote
// it, and one node's words must not crowd out the rest of the status.
const maxFailureMessage = 2048

func boundedMessage(m string) string { return eventnote.Cut(m, maxFailureMessage) }
