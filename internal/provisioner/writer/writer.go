package writer

import (
	"context"
	"errors"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"brewlet.sh/brewlet/internal/vocab"
)

// Lease is the per-node lease that makes one agent the node's only writer: during a
// rolling update old and new agent pods overlap on a node, and only the holder may change
// host state. Its renewals double as the agent's liveness heartbeat.
type Lease struct {
	Client    kubernetes.Interface
	Namespace string
	NodeName  string
	Identity  string // unique per agent process (pod name and UID)
	Duration  time.Duration
}

// ErrNotWriter: this agent does not hold the node's writer lease (any more).
var ErrNotWriter = errors.New("not the node's writer: another agent holds the writer lease")

// LeaseName is the name of a node's writer lease.
func LeaseName(node string) string { return vocab.AgentLeasePrefix + node }

// Run blocks until ctx ends, calling lead with a context that is cancelled when the lease
// is lost or ctx ends, and isWriter that reports whether the lease is still held right now.
// lead must return soon after its context is cancelled: Run waits for it before trying to
// acquire the lease again, and before releasing the lease when ctx ends, so two leads (of
// this process or of the old and new agent of a rolling update) never overlap.
func (w Lease) Run(ctx context.Context, lead func(ctx context.Context, isWriter func() bool)) error {
	d := w.Duration
	if d <= 0 {
		d = 15 * time.Second
	}
	for ctx.Err() == nil {
		if err := w.term(ctx, d, lead); err != nil {
			return err
		}
	}
	return nil
}

// term is one acquisition of the lease: acquire, lead, and return once lead has returned.
func (w Lease) term(ctx context.Context, d time.Duration, lead func(ctx context.Context, isWriter func() bool)) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: w.Namespace, Name: LeaseName(w.NodeName)},
		Client:     w.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: w.Identity},
	}
	// The elector runs on its own context, cancelled only once lead has stopped writing.
	// client-go's ReleaseOnCancel is off: it also releases when a renewal fails, while lead
	// may still be finishing a host change; release (below) runs after lead has returned.
	electCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()
	var mu sync.Mutex
	stopping, leading := false, false
	done := make(chan struct{})
	var le *leaderelection.LeaderElector
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: d, RenewDeadline: d * 2 / 3, RetryPeriod: d / 5,
		Name: LeaseName(w.NodeName),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				defer close(done)
				mu.Lock()
				if stopping {
					mu.Unlock()
					return
				}
				leading = true
				mu.Unlock()
				lctx, cancel := context.WithCancel(leaderCtx)
				defer cancel()
				stop := context.AfterFunc(ctx, cancel)
				defer stop()
				// Held means: this term's context is live, the elector still sees this
				// process as holder, and its last renewal is recent enough that no other
				// agent can have taken the lease over (it must wait a full duration).
				isWriter := func() bool { return lctx.Err() == nil && le.IsLeader() && le.Check(-d/5) == nil }
				lead(lctx, isWriter)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return err
	}
	// When ctx ends: stop lead, wait for it, then stop the elector.
	stopWatch := context.AfterFunc(ctx, func() {
		mu.Lock()
		stopping = true
		wasLeading := leading
		mu.Unlock()
		if wasLeading {
			<-done
		}
		stopElector()
	})
	defer stopWatch()
	le.Run(electCtx) // returns when the lease is lost or the elector stopped
	mu.Lock()
	stopping = true
	wasLeading := leading
	mu.Unlock()
	if wasLeading {
		<-done // never acquire again (or release) while the last lead still runs
	}
	if ctx.Err() != nil && wasLeading {
		w.release(lock)
	}
	return nil
}

// release hands the lease back at shutdown, so the next agent of a rolling update takes
// over at once instead of after a lease duration; it is called only once lead returned.
// Like client-go's own release, it keeps the record but leaves no holder.
func (w Lease) release(lock *resourcelock.LeaseLock) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, _, err := lock.Get(ctx)
	if err != nil || rec.HolderIdentity != w.Identity {
		return
	}
	now := metav1.NewTime(time.Now())
	_ = lock.Update(ctx, resourcelock.LeaderElectionRecord{LeaderTransitions: rec.LeaderTransitions,
		LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now})
}
