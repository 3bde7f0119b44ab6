package runtimeimage

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// conditionEvents: one event per condition a human watches (Approved, RotationProgressing,
// RotationComplete) whose status or reason changed, so a pass that changes nothing, or
// only a count in a message, records nothing. "No node reports the ID yet" is not news.
func conditionEvents(old, updated []metav1.Condition) []Event {
	var out []Event
	for _, typ := range []vocab.ConditionType{vocab.ConditionApproved, vocab.ConditionRotationProgressing, vocab.ConditionRotationComplete} {
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
		case vocab.ReasonRevoked, vocab.ReasonDeleting, vocab.ReasonRotationHalted:
			e.Type = corev1.EventTypeWarning
		}
		out = append(out, e)
	}
	return out
}
