package provisioner

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// WriterLease is the per-node lease that makes one agent the node's only writer: during a
// rolling update old and new agent pods overlap on a node, and only the holder may change
// host state. Its renewals double as the agent's liveness heartbeat.
type WriterLease struct {
	Client    kubernetes.Interface
	Namespace string
	NodeName  string
	Identity  string // unique per agent process (pod name and UID)
	Duration  time.Duration
}

// LeaseName is the name of a node's writer lease.
func LeaseName(node string) string { return "brewlet-provisioner-" + node }

// Run blocks until ctx ends, calling lead with a context that is cancelled when the lease
// is lost, and isWriter that reports whether the lease is still held right now.
func (w WriterLease) Run(ctx context.Context, lead func(ctx context.Context, isWriter func() bool)) error {
	d := w.Duration
	if d <= 0 {
		d = 15 * time.Second
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: w.Namespace, Name: LeaseName(w.NodeName)},
		Client:     w.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: w.Identity},
	}
	var le *leaderelection.LeaderElector
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: d, RenewDeadline: d * 2 / 3, RetryPeriod: d / 5,
		ReleaseOnCancel: true, Name: LeaseName(w.NodeName),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { lead(ctx, func() bool { return le.IsLeader() }) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		le.Run(ctx) // returns when leadership is lost; try again
	}
	return nil
}
