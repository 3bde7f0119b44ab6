package runtimeimage

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// eventAction is the events.k8s.io action of the events this controller records.
const eventAction = "ReconcileRuntimeImage"

// Event is one event the reconciler records on the RuntimeImage after the status that
// caused it was stored.
type Event struct {
	Type    string // corev1.EventTypeNormal or EventTypeWarning
	Reason  vocab.Reason
	Message string
}

// exclusionEvents: one Warning per node newly excluded as stuck from the same target (a node
// listed in status, so at most maxExcludedNodes per pass). Failed nodes are named by the
// rotation conditions' own events.
//
// A node refusing the target because it breaks the runtime's promise gets one Warning too,
// quoting what the node says breaks (broken: node -> its message): the diff is what the
// platform team needs, whether or not the refusals halt the rotation.
func exclusionEvents(old, updated *brewletv1.RotationStatus, broken map[string]string) []Event {
	if updated == nil {
		return nil
	}
	before := map[string]string{}
	if old != nil && old.Target.Generation == updated.Target.Generation && old.Target.Digest == updated.Target.Digest {
		for _, x := range old.ExcludedNodes {
			before[x.Name] = x.Reason
		}
	}
	var out []Event
	for _, x := range updated.ExcludedNodes {
		r := vocab.Reason(x.Reason)
		if msg, ok := broken[x.Name]; ok && r == vocab.ReasonRuntimePromiseBroken && before[x.Name] != x.Reason {
			out = append(out, Event{Type: corev1.EventTypeWarning, Reason: r, Message: fmt.Sprintf(
				"node %s refused generation %d: %s", x.Name, updated.Target.Generation, msg)})
			continue
		}
		if (r != vocab.ReasonNodeTimedOut && r != vocab.ReasonAgentNotReporting && r != vocab.ReasonReportInvalid) || before[x.Name] == x.Reason {
			continue
		}
		why := "it has been allowed the generation longer than its pool's rollout.nodeTimeout without serving it or reporting a failure"
		switch r {
		case vocab.ReasonAgentNotReporting:
			why = "its agent's heartbeat is stale"
		case vocab.ReasonReportInvalid:
			why = "its NodeRuntime report cannot be believed (no observedAt, a malformed node UID, a generation never assigned, or the generation served under another digest)"
		}
		out = append(out, Event{Type: corev1.EventTypeWarning, Reason: r, Message: fmt.Sprintf(
			"node %s excluded from the rotation to generation %d: %s. The rotation goes on without it and it rejoins when it reports the generation; check its agent (kubectl get nodeprofile -o yaml, status.nodesWithoutAgent) and its NodeRuntime",
			x.Name, updated.Target.Generation, why)})
	}
	return out
}

// conditionEvents: one event per condition a human watches (Approved, RotationProgressing,
// RotationComplete, SignatureVerified) whose status or reason changed, so a pass that changes nothing, or
// only a count in a message, records nothing. "No node reports the ID yet" is not news.
func conditionEvents(old, updated []metav1.Condition) []Event {
	var out []Event
	for _, typ := range []vocab.ConditionType{vocab.ConditionApproved, vocab.ConditionRotationProgressing, vocab.ConditionRotationComplete, vocab.ConditionSignatureVerified} {
		n := meta.FindStatusCondition(updated, string(typ))
		if n == nil || n.Reason == string(vocab.ReasonNoNodes) {
			continue
		}
		if o := meta.FindStatusCondition(old, string(typ)); o != nil && o.Status == n.Status && o.Reason == n.Reason {
			continue
		}
		if typ == vocab.ConditionRotationComplete && n.Status != metav1.ConditionTrue {
			continue // its False reasons repeat RotationProgressing's
		}
		e := Event{Type: corev1.EventTypeNormal, Reason: vocab.Reason(n.Reason), Message: n.Message}
		switch vocab.Reason(n.Reason) {
		case vocab.ReasonRevoked, vocab.ReasonDeleting, vocab.ReasonRotationHalted, vocab.ReasonSignatureMissing, vocab.ReasonSignatureInvalid, vocab.ReasonSignatureUnverifiable:
			e.Type = corev1.EventTypeWarning
		}
		out = append(out, e)
	}
	return out
}
