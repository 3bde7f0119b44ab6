package clusterview

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

func TestUntilStale(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	st := func(until *metav1.Time) brewletv1.NodeRuntimeStatus {
		return brewletv1.NodeRuntimeStatus{Runtimes: []brewletv1.NodeRuntimeEntry{{ID: "py", State: "Ready", AuthorizedUntil: until}}}
	}
	for _, tc := range []struct {
		name     string
		old, new brewletv1.NodeRuntimeStatus
		want     bool
	}{
		{"never published", st(nil), st(at(5 * time.Minute)), true},
		{"a renewal a pass later: more than half left, no write", st(at(4 * time.Minute)), st(at(5 * time.Minute)), false},
		{"less than half left: written", st(at(2 * time.Minute)), st(at(5 * time.Minute)), true},
		{"already expired: written", st(at(-time.Minute)), st(at(5 * time.Minute)), true},
		{"no authorization now (revoked, installing)", st(at(-time.Minute)), st(nil), false},
		{"another ID", brewletv1.NodeRuntimeStatus{Runtimes: []brewletv1.NodeRuntimeEntry{{ID: "node", AuthorizedUntil: at(5 * time.Minute)}}},
			st(at(5 * time.Minute)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := untilStale(tc.old, tc.new, now); got != tc.want {
				t.Fatalf("untilStale = %v, want %v", got, tc.want)
			}
		})
	}
}
