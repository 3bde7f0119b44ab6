// Package runtimeimage is the RuntimeImage controller: it assigns generations within an
// epoch, keeps the Approved condition, and holds deleted RuntimeImages until every node
// withdrew their epoch. Decisions are pure functions of the object and the NodeRuntime
// reports (this file); the reconciler only reads, calls Decide and writes.
package runtimeimage

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// maxHoldersInMessage bounds the node names a condition message lists, so a large fleet
// never produces an oversized status.
const maxHoldersInMessage = 5

// Decision is what one reconcile pass makes true.
type Decision struct {
	// Status is the desired status: the fields this controller owns recomputed, every
	// other field (rotation restarts) kept as it was.
	Status brewletv1.RuntimeImageStatus
	// AddFinalizer: the object lacks the revocation finalizer and is not being deleted.
	AddFinalizer bool
	// ReleaseFinalizer: the object is being deleted, holds the finalizer, and no node
	// reports its epoch any more.
	ReleaseFinalizer bool
	// Holders are the nodes that still report the object's epoch, sorted.
	Holders []string
	// Events to record once Status is stored.
	Events []Event
	// Recheck: the rotation is not complete, so a heartbeat going stale or a node's
	// installBy passing (NextDeadline, zero: none) may change it without any object changing.
	Recheck      bool
	NextDeadline time.Time
}

// Decide computes the RuntimeImage's desired status and finalizer from the object as read
// and the NodeRuntime reports. now stamps a condition whose status changes; an unchanged
// condition keeps its transition time, so a pass that changes nothing decides the status
// it read.
//
// The status is the controller's only memory: the generation is derived from the
// generation and digest already recorded there, so an operator restart, a leader change or
// a lost write continues the sequence instead of restarting it. Callers must write the
// result conditionally on the resourceVersion they read (optimistic concurrency); that is
// what makes "derived from the status read" equal to "derived from the status stored".
//
// maxFailures is the rotation's failure budget (rollout.maxFailures of the profiles that
// offer the ID, the smallest when several do); see rotation. fresh says whether a node's
// agent is alive (its heartbeat is recent; see observeTasks), silent whether it is known to
// have stopped (nodereports.HeartbeatClock.Silent; see rotation). fleetPause is the pause of every
// rotation (fleetpause.Of; "" none), which holds this one as spec.paused does. sigs are the
// verdicts on the signatures of the spec's digest and of the current generation's: a digest
// that must be signed and is not verified is never taken as a generation, nor kept
// approved (see approval).
func Decide(ri *brewletv1.RuntimeImage, reports []brewletv1.NodeRuntime, maxFailures int, fresh, silent func(node string) bool, fleetPause string, sigs Verdicts, now metav1.Time) Decision {
	st := *ri.Status.DeepCopy()
	d := Decision{Holders: Holders(ri.Name, ri.UID, reports)}

	digest := DigestOf(ri.Spec.Source.Image)
	sig := sigs.Spec.about(digest)
	held := sig.holds()
	switch {
	case held && st.Epoch != ri.UID:
		// The epoch's first digest is not signed yet: the epoch is recorded, no generation
		// is (Digest stays empty, so no node has anything to install).
		st.Epoch, st.Digest, st.Rotation = ri.UID, "", nil
	case held:
		// A rotation to an unsigned digest stops here: the status keeps the generation the
		// nodes have, and the agents install only the digest the status names.
	case st.Epoch == ri.UID && holdsBadDigest(&st, digest):
		// Rolled back from this digest: it is not tried again until the spec names another.
	case st.Epoch != ri.UID || (st.Digest == "" && digest != ""):
		// First sight of this epoch. A status carrying another epoch (restored from a
		// backup, written by hand) is never trusted for this one, but its generation is
		// still not reused: counting on from it keeps the number monotonic for anyone who
		// saw it, and generations of different epochs are never compared.
		st.Epoch, st.Generation, st.Digest = ri.UID, st.Generation+1, digest
		st.Rotation, st.Previous, st.RolledBack = nil, nil, nil
	case digest != "" && digest != st.Digest:
		// A rotation: a new digest is a new generation, even a digest this epoch used
		// before (generations are never reused). A change of repository with the same
		// digest is the same content and keeps the generation (docs/operator.md: a generation is
		// one digest bound to an ID).
		st.Previous = &brewletv1.GenerationRef{Generation: st.Generation, Digest: st.Digest, Image: st.Image}
		st.Generation++
		st.Digest = digest
		st.RolledBack = nil
	}
	if digest != "" && digest == st.Digest {
		st.Image = ri.Spec.Source.Image // the source of the current generation, mirror moves included
	}
	if rb := st.RollbackInEffect(); rb != nil && !rb.Released && digest != rb.Bad.Digest {
		rb.Released = true // the spec named another digest: naming the bad one again is a new decision
	}
	if rot := st.Rotation; rot != nil && rot.Target.Generation == st.Generation && rot.Target.Digest == st.Digest {
		// Before rollBack: containers failing on the target roll it back in this pass.
		rot.FailedStarts = failedStartsOf(ri, &st, rot, reports, maxFailures, now)
		if old := ri.Status.Rotation; rot.FailedStarts.IsExceeded() && (old == nil || !old.FailedStarts.IsExceeded()) {
			d.Events = append(d.Events, Event{Type: corev1.EventTypeWarning, Reason: vocab.ReasonFailedStarts, Message: rot.FailedStarts.Message})
		}
	}
	rolledBack, rollbackEvents := rollBack(ri, &st, sigs.Previous.about(previousDigest(&ri.Status)), now)
	if st.Digest != ri.Status.Digest && st.RollbackInEffect() != nil {
		sigs.Current = sigs.Previous // the verdict on the digest the status now names
	}
	st.ObservedGeneration = ri.Generation

	deleting := ri.DeletionTimestamp != nil
	approved := metav1.Condition{
		Type:               string(vocab.ConditionApproved),
		ObservedGeneration: ri.Generation,
		LastTransitionTime: now,
	}
	switch {
	case deleting:
		approved.Status, approved.Reason = metav1.ConditionFalse, string(vocab.ReasonDeleting)
		approved.Message = fmt.Sprintf("RuntimeImage %s is being deleted: no new container starts with it; running containers keep going", ri.Name)
		if len(d.Holders) > 0 {
			approved.Message += fmt.Sprintf("; waiting for %s to withdraw epoch %s", nodeList(d.Holders), ri.UID)
		}
	case ri.Spec.Revoked:
		approved.Status, approved.Reason = metav1.ConditionFalse, string(vocab.ReasonRevoked)
		approved.Message = fmt.Sprintf("spec.revoked is true: no new container starts with %s on any node once its authorization expires; running containers keep going. Set spec.revoked to false to re-approve epoch %s", ri.Name, ri.UID)
	default:
		var reason vocab.Reason
		approved.Status, reason, approved.Message = approval(ri, st, sigs, digest)
		approved.Reason = string(reason)
	}
	meta.SetStatusCondition(&st.Conditions, approved)
	if c := signatureCondition(ri, st, sig); c != nil {
		c.LastTransitionTime = now
		meta.SetStatusCondition(&st.Conditions, *c)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, string(vocab.ConditionSignatureVerified))
	}
	if rolledBack != nil {
		meta.SetStatusCondition(&st.Conditions, *rolledBack)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, string(vocab.ConditionRolledBack))
	}
	var broken map[string]string
	d.NextDeadline, broken = rotation(ri, &st, reports, maxFailures, silent, fleetPause, now)
	d.Recheck = st.Rotation != nil && st.Rotation.RotationCompletedAt == nil && st.Rotation.Nodes != (brewletv1.RotationNodeCounts{})
	observeTasks(ri, &st, reports, fresh, now)
	if st.TaskObservations == nil {
		st.TaskObservations = []brewletv1.TaskObservation{}
	}
	d.Status = st
	d.Events = append(d.Events, conditionEvents(ri.Status.Conditions, st.Conditions)...)
	d.Events = append(d.Events, exclusionEvents(ri.Status.Rotation, st.Rotation, broken)...)
	d.Events = append(d.Events, rollbackEvents...)

	has := slices.Contains(ri.Finalizers, vocab.FinalizerRevocation)
	d.AddFinalizer = !deleting && !has
	d.ReleaseFinalizer = deleting && has && len(d.Holders) == 0
	return d
}

// Holders returns the nodes whose NodeRuntime reports runtime id in epoch with a state
// that may still hold it. Every state but Revoked counts: Ready and Available mean an
// authorization and a label; Installing and Failed may sit on an authorization written
// for that epoch earlier (an install of a later generation, a failed renewal). Revoked, an
// entry of another epoch, and no entry at all mean the node withdrew it. Running
// containers (status.tasks) do not hold the epoch: revocation never stops them.
func Holders(id string, epoch types.UID, reports []brewletv1.NodeRuntime) []string {
	var out []string
	for i := range reports {
		for _, e := range reports[i].Status.Runtimes {
			if e.ID == id && e.Epoch == epoch && e.State != string(vocab.StateRevoked) {
				out = append(out, reports[i].Name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// DigestOf returns the digest of a digest-pinned reference (registry/repo@sha256:...), or
// "" when it has none (the API server refuses such a spec, so this is only defence).
func DigestOf(image string) string {
	i := strings.LastIndexByte(image, '@')
	if i < 0 {
		return ""
	}
	return image[i+1:]
}

func nodeList(nodes []string) string {
	if len(nodes) <= maxHoldersInMessage {
		return "node(s) " + strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("node(s) %s and %d more", strings.Join(nodes[:maxHoldersInMessage], ", "), len(nodes)-maxHoldersInMessage)
}
