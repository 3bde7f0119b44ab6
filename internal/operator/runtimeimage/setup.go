package runtimeimage

import (
	"context"

	nodev1 "k8s.io/api/node/v1"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/eventnote"
	"brewlet.sh/brewlet/internal/operator/fleetpause"
	"brewlet.sh/brewlet/internal/operator/nodereports"
)

// ControllerName names the controller in logs and controller-runtime's metrics.
const ControllerName = "runtimeimage"

// Setup registers the NodeRuntime index and the controller with mgr. RuntimeImages and
// NodeRuntimes are watched through the manager's informers; a pass never lists from the
// API server (one confirming read happens only when a finalizer is about to be released).
// skipNameValidation lets a process build more than one manager (tests that restart the
// operator in-process); controller-runtime otherwise refuses a second "runtimeimage".
// beats times the agents' Lease renewals, the nodes' heartbeats (a renewal wakes nothing:
// passes with old containers to show come back every StaleAfter). sigs checks the
// signatures RuntimeImages require.
func Setup(ctx context.Context, mgr manager.Manager, skipNameValidation bool, beats *nodereports.HeartbeatClock, sigs *SignatureChecker) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &brewletv1.NodeRuntime{}, nodereports.IndexRuntimeID, nodereports.RuntimeIDs); err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: eventnote.For(mgr),
		Beats: beats, Signatures: sigs}
	return builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		For(&brewletv1.RuntimeImage{}).
		Watches(&brewletv1.NodeRuntime{}, handler.EnqueueRequestsFromMapFunc(nodereports.Requests)).
		// A profile's rollout.maxFailures is the rotation's failure budget.
		Watches(&brewletv1.NodeProfile{}, handler.EnqueueRequestsFromMapFunc(offered)).
		// The fleet pause (an annotation on RuntimeClass brewlet) holds every RuntimeImage.
		Watches(&nodev1.RuntimeClass{}, fleetpause.EveryRuntimeImage(mgr.GetClient()), builder.WithPredicates(fleetpause.Changes)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: &skipNameValidation}).
		Complete(r)
}

// offered maps a NodeProfile to the RuntimeImages it offers.
func offered(_ context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*brewletv1.NodeProfile)
	if !ok {
		return nil
	}
	out := make([]reconcile.Request, 0, len(p.Spec.RuntimeImages))
	for _, r := range p.Spec.RuntimeImages {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: r.ID}})
	}
	return out
}
