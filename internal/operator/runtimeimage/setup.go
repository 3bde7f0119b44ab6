package runtimeimage

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

// ControllerName names the controller in logs and controller-runtime's metrics.
const ControllerName = "runtimeimage"

// Setup registers the NodeRuntime index and the controller with mgr. RuntimeImages and
// NodeRuntimes are watched through the manager's informers; a pass never lists from the
// API server (one confirming read happens only when a finalizer is about to be released).
// skipNameValidation lets a process build more than one manager (tests that restart the
// operator in-process); controller-runtime otherwise refuses a second "runtimeimage".
func Setup(ctx context.Context, mgr manager.Manager, skipNameValidation bool) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &brewletv1.NodeRuntime{}, IndexRuntimeID, RuntimeIDs); err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}
	return builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		For(&brewletv1.RuntimeImage{}).
		Watches(&brewletv1.NodeRuntime{}, handler.EnqueueRequestsFromMapFunc(Requests)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: &skipNameValidation}).
		Complete(r)
}
