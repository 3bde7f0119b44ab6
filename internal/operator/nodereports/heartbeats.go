package nodereports

import (
	"context"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"brewlet.sh/brewlet/internal/vocab"
)

// HeartbeatClock times the agents' Lease renewals on the operator's own clock. A renewal's
// renewTime is written by the node's clock: compared with the operator's, a node whose clock
// runs ahead would look alive long after its agent stopped (its last report trusted, its
// old containers not restarted), and one whose clock runs behind would never look alive.
// So freshness counts from when the operator saw renewTime change, as client-go's leader
// election does with its observed time. A Lease seen for the first time (operator start)
// counts from its renewTime, but never from later than now: a dead node stays stale, and a
// node whose clock is behind looks alive again at its next renewal.
type HeartbeatClock struct {
	Namespace string // the agents' namespace ("": no heartbeats, every node stale)
	// StaleAfter is how long a node may go without a renewal before its report proves
	// nothing (0: DefaultStaleAfter).
	StaleAfter time.Duration

	mu   sync.Mutex
	seen map[string]renewal // by node name
	now  func() time.Time
	// synced reports whether the informer delivered every Lease that existed when it
	// started (nil until Start): before that, a missing heartbeat means nothing.
	synced func() bool
}

type renewal struct {
	renewTime time.Time // as the agent wrote it
	at        time.Time // when the operator saw it, on its clock
}

// NewHeartbeatClock is the clock of the agents' Leases in namespace.
func NewHeartbeatClock(namespace string) *HeartbeatClock {
	return &HeartbeatClock{Namespace: namespace, seen: map[string]renewal{}, now: time.Now}
}

// Start feeds the clock from the cache's Lease informer: it times a renewal when the
// event arrives, not when a pass next reads the cache (passes may be a StaleAfter apart).
func (c *HeartbeatClock) Start(ctx context.Context, ca cache.Cache) error {
	if c.Namespace == "" {
		return nil
	}
	inf, err := ca.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return err
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.observe(o) },
		UpdateFunc: func(_, o any) { c.observe(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if l, ok := o.(*coordinationv1.Lease); ok {
				if node, ok := c.node(l); ok {
					c.mu.Lock()
					delete(c.seen, node)
					c.mu.Unlock()
				}
			}
		},
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.synced = reg.HasSynced
	c.mu.Unlock()
	return nil
}

func (c *HeartbeatClock) node(l *coordinationv1.Lease) (string, bool) {
	if l.Namespace != c.Namespace {
		return "", false
	}
	return strings.CutPrefix(l.Name, vocab.AgentLeasePrefix)
}

func (c *HeartbeatClock) observe(o any) {
	l, ok := o.(*coordinationv1.Lease)
	if !ok || l.Spec.RenewTime == nil {
		return
	}
	// A released Lease (holder cleared, renewTime set at release: an agent stopping for a
	// rolling update) still counts from its renewal, so the handover between agents never
	// makes a node look silent.
	if node, ok := c.node(l); ok {
		c.Observe(node, l.Spec.RenewTime.Time)
	}
}

// Observe records node's renewTime as the agent wrote it.
func (c *HeartbeatClock) Observe(node string, renewTime time.Time) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, known := c.seen[node]
	switch {
	case !known:
		c.seen[node] = renewal{renewTime: renewTime, at: minTime(renewTime, now)}
	case !renewTime.Equal(prev.renewTime):
		c.seen[node] = renewal{renewTime: renewTime, at: now}
	}
}

// Heartbeats are the nodes' last renewals on the operator's clock (none for a nil clock:
// every node stale).
func (c *HeartbeatClock) Heartbeats() Heartbeats {
	if c == nil {
		return Heartbeats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(Heartbeats, len(c.seen))
	for node, r := range c.seen {
		out[node] = r.at
	}
	return out
}

// Fresh reports whether node's agent renewed its Lease within StaleAfter of now.
func (c *HeartbeatClock) Fresh(node string, now time.Time) bool {
	at, ok := c.LastBeat(node)
	return ok && now.Sub(at) <= c.StaleAfterOrDefault()
}

// Silent reports whether node's agent is known to have stopped: the clock watches the
// agents' Leases, has seen every one that existed when it started, and node's renewal is
// older than StaleAfter or was never seen. Unlike !Fresh, a clock that knows nothing
// (no namespace, informer not synced yet) finds no node silent: a rotation must never
// leave nodes behind because the operator just started.
func (c *HeartbeatClock) Silent(node string, now time.Time) bool {
	if c == nil || c.Namespace == "" {
		return false
	}
	c.mu.Lock()
	synced := c.synced
	c.mu.Unlock()
	if synced == nil || !synced() {
		return false
	}
	return !c.Fresh(node, now)
}

// LastBeat is node's last renewal on the operator's clock, if one was seen.
func (c *HeartbeatClock) LastBeat(node string) (time.Time, bool) {
	if c == nil {
		return time.Time{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.seen[node]
	return r.at, ok
}

// StaleAfterOrDefault is c's StaleAfter, or DefaultStaleAfter for a nil clock or none set.
func (c *HeartbeatClock) StaleAfterOrDefault() time.Duration {
	if c == nil || c.StaleAfter <= 0 {
		return DefaultStaleAfter
	}
	return c.StaleAfter
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Heartbeats are the nodes' agent heartbeats: node name -> the last renewal of its agent's
// coordination Lease. A node absent from the map has no live agent.
type Heartbeats map[string]time.Time

// Fresh says whether node's agent renewed its heartbeat within staleAfter of now.
func (h Heartbeats) Fresh(node string, now time.Time, staleAfter time.Duration) bool {
	t, ok := h[node]
	return ok && now.Sub(t) <= staleAfter
}

// DefaultStaleAfter: an agent renews its Lease every few seconds (a fifth of its lease
// duration); a minute without renewal means it is gone, not slow.
const DefaultStaleAfter = time.Minute
