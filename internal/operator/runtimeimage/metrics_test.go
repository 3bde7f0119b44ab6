package runtimeimage

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

func TestRotationHeld(t *testing.T) {
	halted := metav1.Condition{Type: string(vocab.ConditionRotationProgressing), Status: metav1.ConditionFalse, Reason: string(vocab.ReasonRotationHalted)}
	rotating := metav1.Condition{Type: string(vocab.ConditionRotationProgressing), Status: metav1.ConditionTrue, Reason: string(vocab.ReasonRotating)}
	rollback := &brewletv1.Rollback{Generation: 3, To: brewletv1.GenerationRef{Generation: 1, Digest: "sha256:a"}}
	for _, tc := range []struct {
		name string
		st   brewletv1.RuntimeImageStatus
		want []vocab.Reason
	}{
		{"nothing", brewletv1.RuntimeImageStatus{Generation: 2}, nil},
		{"rotating", brewletv1.RuntimeImageStatus{Conditions: []metav1.Condition{rotating}}, nil},
		{"halted", brewletv1.RuntimeImageStatus{Conditions: []metav1.Condition{halted}}, []vocab.Reason{vocab.ReasonRotationHalted}},
		{"restarts halted", brewletv1.RuntimeImageStatus{Rotation: &brewletv1.RotationStatus{RestartsHalted: &brewletv1.RestartsHalt{Failed: 2}}},
			[]vocab.Reason{vocab.ReasonRestartsHalted}},
		{"rolled back, in effect", brewletv1.RuntimeImageStatus{Generation: 3, Digest: "sha256:a", RolledBack: rollback}, []vocab.Reason{vocab.ReasonRolledBack}},
		// A later generation replaced the rollback: nothing is held any more.
		{"rolled back, superseded", brewletv1.RuntimeImageStatus{Generation: 4, Digest: "sha256:b", RolledBack: rollback}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rotationHeld(&tc.st)
			if len(got) != len(heldReasons) {
				t.Fatalf("%d reasons exported, want all %d", len(got), len(heldReasons))
			}
			for r, held := range got {
				want := false
				for _, w := range tc.want {
					want = want || w == r
				}
				if held != want {
					t.Errorf("%s: %v, want %v", r, held, want)
				}
			}
		})
	}
}

// A node's series follow its last report and go with it.
func TestObserveAuthorizations(t *testing.T) {
	at := metav1.NewTime(time.Unix(1000, 0))
	until := metav1.NewTime(time.Unix(1300, 0))
	report := func(node string, entries ...brewletv1.NodeRuntimeEntry) brewletv1.NodeRuntime {
		return brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: brewletv1.NodeRuntimeStatus{ObservedAt: &at, Runtimes: entries}}
	}
	id := "metrics-test-py"
	defer forget(id)
	observeAuthorizations(id, []brewletv1.NodeRuntime{
		report("a", brewletv1.NodeRuntimeEntry{ID: id, AuthorizedUntil: &until}, brewletv1.NodeRuntimeEntry{ID: "other", AuthorizedUntil: &until}),
		report("b", brewletv1.NodeRuntimeEntry{ID: id}), // not authorized: no series
		{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Status: brewletv1.NodeRuntimeStatus{Runtimes: []brewletv1.NodeRuntimeEntry{{ID: id, AuthorizedUntil: &until}}}},
	})
	// Other tests of the package reconcile too: look at this ID's series only.
	if v := testutil.ToFloat64(authorizedUntilGauge.WithLabelValues(id, "a")); v != 1300 {
		t.Errorf("authorized until on a: %v, want 1300", v)
	}
	if v := testutil.ToFloat64(reportedAtGauge.WithLabelValues(id, "a")); v != 1000 {
		t.Errorf("reported at on a: %v, want 1000", v)
	}
	for _, n := range []string{"b", "c"} { // not authorized; a report without observedAt
		if authorizedUntilGauge.DeleteLabelValues(id, n) || reportedAtGauge.DeleteLabelValues(id, n) {
			t.Errorf("node %s has series, want none", n)
		}
	}
	observeAuthorizations(id, nil) // node a left
	if authorizedUntilGauge.DeleteLabelValues(id, "a") || reportedAtGauge.DeleteLabelValues(id, "a") {
		t.Fatal("node a's series stayed after it left")
	}
}
