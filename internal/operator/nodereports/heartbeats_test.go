package nodereports

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

// Freshness counts on the operator's clock from when a renewal was seen, whatever the
// node's clock says.
func TestHeartbeatClock(t *testing.T) {
	const stale = time.Minute
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	type step struct {
		after   time.Duration  // operator clock since t0
		renew   *time.Duration // the node writes renewTime = t0 + renew (nil: no renewal)
		deleted bool
		fresh   bool
	}
	d := func(x time.Duration) *time.Duration { return &x }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"in sync, then silent", []step{
			{after: 0, renew: d(0), fresh: true},
			{after: 30 * time.Second, renew: d(30 * time.Second), fresh: true},
			{after: 89 * time.Second, fresh: true},
			{after: 91 * time.Second, fresh: false},
		}},
		{"clock an hour ahead, then silent: stale a minute after its last renewal", []step{
			{after: 0, renew: d(time.Hour), fresh: true},
			{after: 10 * time.Second, renew: d(time.Hour + 10*time.Second), fresh: true},
			{after: 71 * time.Second, fresh: false}, // renewTime still 59 minutes ahead
		}},
		{"clock an hour behind: stale when first seen, fresh from its next renewal", []step{
			{after: 0, renew: d(-time.Hour), fresh: false},
			{after: 10 * time.Second, renew: d(-time.Hour + 10*time.Second), fresh: true},
			{after: 69 * time.Second, fresh: true},
			{after: 71 * time.Second, fresh: false},
		}},
		{"dead before the operator started", []step{
			{after: 0, renew: d(-10 * time.Minute), fresh: false},
		}},
		{"the same renewTime seen again (a resync) is no renewal", []step{
			{after: 0, renew: d(0), fresh: true},
			{after: 50 * time.Second, renew: d(0), fresh: true},
			{after: 61 * time.Second, renew: d(0), fresh: false},
		}},
		{"a deleted Lease is no heartbeat", []step{
			{after: 0, renew: d(0), fresh: true},
			{after: time.Second, deleted: true, fresh: false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			c := NewHeartbeatClock("brewlet-system")
			c.now = func() time.Time { return now }
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "brewlet-system", Name: vocab.AgentLeasePrefix + "n1"}}
			for i, s := range tc.steps {
				now = t0.Add(s.after)
				if s.renew != nil {
					rt := metav1.NewMicroTime(t0.Add(*s.renew))
					l := lease.DeepCopy()
					l.Spec.RenewTime = &rt
					c.observe(l)
				}
				if s.deleted {
					delete(c.seen, "n1")
				}
				if got := c.Heartbeats().Fresh("n1", now, stale); got != s.fresh {
					t.Fatalf("step %d (%s after start): fresh=%v, want %v", i, s.after, got, s.fresh)
				}
			}
		})
	}
	// Leases of other namespaces or names are not heartbeats.
	c := NewHeartbeatClock("brewlet-system")
	rt := metav1.NewMicroTime(time.Now())
	for _, l := range []*coordinationv1.Lease{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: vocab.AgentLeasePrefix + "n1"}, Spec: coordinationv1.LeaseSpec{RenewTime: &rt}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "brewlet-system", Name: "brewlet-operator"}, Spec: coordinationv1.LeaseSpec{RenewTime: &rt}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "brewlet-system", Name: vocab.AgentLeasePrefix + "n2"}},
	} {
		c.observe(l)
	}
	if h := c.Heartbeats(); len(h) != 0 {
		t.Fatalf("heartbeats from foreign Leases: %v", h)
	}
}

// Silent needs knowledge: a clock without a namespace, or whose informer has not delivered
// every Lease yet, finds no node silent (an operator that just started must not exclude the
// fleet from a rotation); a synced clock finds a node silent exactly when it is not fresh.
func TestHeartbeatClockSilent(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	synced := false
	c := NewHeartbeatClock("brewlet")
	c.now = func() time.Time { return t0 }
	c.Observe("alive", t0)
	if c.Silent("dead", t0) {
		t.Fatal("an unstarted clock found a node silent")
	}
	c.synced = func() bool { return synced }
	if c.Silent("dead", t0) {
		t.Fatal("a clock whose informer has not synced found a node silent")
	}
	synced = true
	if !c.Silent("dead", t0) || c.Silent("alive", t0) || !c.Silent("alive", t0.Add(2*DefaultStaleAfter)) {
		t.Fatal("a synced clock: silent must be !fresh")
	}
	var none *HeartbeatClock
	off := NewHeartbeatClock("")
	off.synced = func() bool { return true }
	if none.Silent("dead", t0) || off.Silent("dead", t0) {
		t.Fatal("no clock, or one without a namespace, found a node silent")
	}
}
