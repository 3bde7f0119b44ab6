package restarts

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// Target is the generation workloads move to, once every node serves it.
type Target struct {
	Barrier
	// CompletedAt is the rotation's rotationCompletedAt (zero while it is incomplete).
	CompletedAt time.Time
	// Pause says what holds every restart ("" nothing): the RuntimeImage's spec.paused, or
	// the pause of every rotation (fleetpause.Of).
	Pause string
	// Rollback: the target serves generation Same's digest again after a generation failed
	// workloads. Containers on Same run the target's bytes and are not restarted; restarts
	// back start at once (no soak, no restart window: pods are on a generation shown to
	// break workloads).
	Rollback bool
	Same     int64
	// Bad is the generation the rollback replaces: a workload whose template was restarted
	// onto it is restarted back even when none of its containers runs right now (a crash
	// loop between two attempts), so its pods start afresh instead of waiting out a backoff.
	Bad int64
	// FailedStarts, when set, says new containers fail to start on the target on more
	// nodes than the rollout budget (status.rotation.failedStarts): no restart starts.
	FailedStarts string
}

func specPaused(id string) string {
	return fmt.Sprintf("RuntimeImage %s has spec.paused: no restart starts; set it to false to resume", id)
}

// TargetOf returns the RuntimeImage's restart target; ok is false while its current
// generation has not reached every node (restarts would land pods on nodes still
// installing).
func TargetOf(ri *brewletv1.RuntimeImage) (Target, bool) {
	st := ri.Status
	rot := st.Rotation
	if st.Epoch != ri.UID || st.Generation < 1 || rot == nil || rot.RotationCompletedAt == nil ||
		rot.Target.Generation != st.Generation || !meta.IsStatusConditionTrue(st.Conditions, string(vocab.ConditionRotationComplete)) {
		return Target{}, false
	}
	t := Target{Barrier: Barrier{ID: ri.Name, Epoch: ri.UID, Generation: st.Generation}, CompletedAt: rot.RotationCompletedAt.Time}
	if rb := st.RollbackInEffect(); rb != nil {
		t.Rollback, t.Same, t.Bad = true, rb.To.Generation, rb.Bad.Generation
	}
	if ri.Spec.Paused {
		t.Pause = specPaused(ri.Name)
	}
	if f := rot.FailedStarts; f.IsExceeded() {
		t.FailedStarts = f.Message
	}
	return t, true
}
