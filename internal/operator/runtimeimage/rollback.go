package runtimeimage

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// A rollback is a new generation, never a step back: generation N failed the workloads
// restarted onto it, so generation N+1 is assigned with the digest of the generation N
// replaced (status.previous). Every rule that compares generations stays true as written —
// they only ever increase, `current` on a node only moves forward, a barrier of N+1 means
// "started on N+1's bytes or newer" — and nodes install N+1 from the layers they already
// have (the installer finds the digest installed under N-1 and moves no byte). What makes
// it a rollback and not a rotation: every node is allowed it at once (no waves, no pause;
// rollout.Target.Rollback), no node compares it with N's promise (it is the promise N
// broke), containers still on N-1 count as on N+1 (RuntimeImageStatus.SameBytes: the
// workloads that never moved are not restarted), restarts back start without soak or
// window, and N's digest is not assigned again while the spec names it.

// rollbackDue says whether the current generation is to be rolled back: its restarts halted
// (the rotation's record for exactly this generation and digest) and spec.onFailure is
// RollBack. prev is the generation to go back to (nil when there is none).
func rollbackDue(ri *brewletv1.RuntimeImage, st *brewletv1.RuntimeImageStatus) (due bool, prev *brewletv1.GenerationRef) {
	rot := st.Rotation
	if ri.Spec.OnFailure == brewletv1.OnFailureHalt || ri.DeletionTimestamp != nil || ri.Spec.Revoked ||
		st.Epoch != ri.UID || st.Generation < 1 || rot == nil || (rot.RestartsHalted == nil && !rot.FailedStarts.IsExceeded()) ||
		rot.Target.Generation != st.Generation || rot.Target.Digest != st.Digest || st.RollbackInEffect() != nil {
		// A rollback generation is not rolled back in turn: it serves what ran before the
		// failed one, and there is nothing older the fleet is known to have run well.
		return false, nil
	}
	if p := st.Previous; p != nil && p.Generation > 0 && p.Generation < st.Generation && p.Digest != "" && p.Digest != st.Digest {
		return true, p
	}
	return true, nil
}

// rollBack assigns the rollback generation when one is due and possible: prevSig is the
// verdict on the previous digest's signature (a digest that stopped verifying is not
// served again). It returns the RolledBack condition to set (nil: remove it) and the
// Warning event of a rollback made now.
func rollBack(ri *brewletv1.RuntimeImage, st *brewletv1.RuntimeImageStatus, prevSig Signature, now metav1.Time) (*metav1.Condition, []Event) {
	cond := func(status metav1.ConditionStatus, reason vocab.Reason, msg string) *metav1.Condition {
		return &metav1.Condition{Type: string(vocab.ConditionRolledBack), Status: status, Reason: string(reason),
			Message: msg, ObservedGeneration: ri.Generation, LastTransitionTime: now}
	}
	due, prev := rollbackDue(ri, st)
	switch {
	case due && prev == nil:
		return cond(metav1.ConditionFalse, vocab.ReasonRollbackUnavailable, fmt.Sprintf(
			"workloads failed on generation %d (%s), but it has no earlier generation of this epoch to go back to; nodes keep it. Set spec.source.image to a digest that works",
			st.Generation, st.Digest)), nil
	case due && prevSig.holds():
		return cond(metav1.ConditionFalse, vocab.ReasonRollbackUnavailable, fmt.Sprintf(
			"workloads failed on generation %d (%s), but generation %d's digest %s is not served again: its signature does not verify now (%s); nodes keep generation %d. Set spec.source.image to a signed digest that works",
			st.Generation, st.Digest, prev.Generation, prev.Digest, prevSig.Message, st.Generation)), nil
	case due:
		rot := st.Rotation
		bad := brewletv1.GenerationRef{Generation: st.Generation, Digest: st.Digest}
		st.Generation++
		st.Digest, st.Image = prev.Digest, prev.Image
		// Previous stays: if the rollback generation fails too, there is nothing better to
		// go back to (its digest is Previous's), and rollbackDue finds none.
		reason, what, why := vocab.ReasonRestartsHalted, "restarted workloads", ""
		if h := rot.RestartsHalted; h != nil && h.Failed > h.MaxFailures {
			why = h.Message
			if f := firstFailure(rot.Restarts); f != "" {
				why += "; " + f
			}
		} else {
			reason, what, why = vocab.ReasonFailedStarts, "new containers", rot.FailedStarts.Message
		}
		msg := fmt.Sprintf("generation %d (%s) failed %s: %s. Generation %d serves generation %d's digest %s again on every node from what they have installed, and workloads restarted onto generation %d are restarted back. %s is not assigned again while spec.source.image names it: set another digest to rotate",
			bad.Generation, bad.Digest, what, why, st.Generation, prev.Generation, prev.Digest, bad.Generation, bad.Digest)
		st.RolledBack = &brewletv1.Rollback{Generation: st.Generation, To: *prev, Bad: bad,
			Reason: string(reason), Message: msg, At: now}
		return cond(metav1.ConditionTrue, vocab.ReasonRolledBack, msg),
			[]Event{{Type: corev1.EventTypeWarning, Reason: vocab.ReasonRolledBack, Message: msg}}
	}
	if rb := st.RollbackInEffect(); rb != nil {
		return cond(metav1.ConditionTrue, vocab.ReasonRolledBack, rb.Message), nil
	}
	return nil, nil
}

// holdsBadDigest says whether the spec's digest is the one the rollback in effect replaced
// and the spec has not named another since: it is not assigned again.
func holdsBadDigest(st *brewletv1.RuntimeImageStatus, digest string) bool {
	rb := st.RollbackInEffect()
	return rb != nil && !rb.Released && digest == rb.Bad.Digest
}

// firstFailure says how the first failed restart of the records failed ("": none): the
// records go with the target, so the rollback keeps what the platform team needs to look at.
func firstFailure(records []brewletv1.WorkloadRestart) string {
	for _, r := range records {
		if r.Outcome == "Failed" {
			return boundedMessage(fmt.Sprintf("%s %s/%s failed (%s): %s", r.Kind, r.Namespace, r.Name, r.Reason, r.Message))
		}
	}
	return ""
}
