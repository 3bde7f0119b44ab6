package restarts

import (
	"context"
	"time"

	nodev1 "k8s.io/api/node/v1"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
	"brewlet.sh/brewlet/internal/vocab"
)

// ControllerName names the controller in logs, events and controller-runtime's metrics.
const ControllerName = "rotationrestarts"

// Options configure rotation restarts (the chart's operator.rotationRestarts).
type Options struct {
	Enabled          bool
	MaxConcurrent    int           // at most this many workloads restarting at once (default 5)
	ProgressDeadline time.Duration // a restart not rolled out by then is Failed and frees its slot (default 10m)
	// MaxFailures: once more restarts of one target failed, no further one starts.
	MaxFailures int
	// Soak: restarts start this long after the rotation completed (0: at once).
	Soak time.Duration
	// Window: restarts start only inside it (nil: at any time); ParseWindow.
	Window *Window
	// Namespaces limits restarts (and what the operator watches) to these; empty: all.
	Namespaces []string
}

// Setup registers the controller. Workloads and pods (stripped by StripPod) are read through the
// manager's informers; a workload, pod or node report wakes the RuntimeImage it runs on.
func Setup(ctx context.Context, mgr manager.Manager, o Options, beats *nodereports.HeartbeatClock, skipNameValidation bool) error {
	if !o.Enabled {
		return nil
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, IndexPodRuntimeID, PodRuntimeID); err != nil {
		return err
	}
	for _, w := range []client.Object{&appsv1.Deployment{}, &appsv1.StatefulSet{}, &appsv1.DaemonSet{}} {
		if err := mgr.GetFieldIndexer().IndexField(ctx, w, IndexWorkloadRuntimeID, WorkloadRuntimeID); err != nil {
			return err
		}
	}
	p := Policy{MaxConcurrent: o.MaxConcurrent, ProgressDeadline: o.ProgressDeadline, MaxFailures: max(o.MaxFailures, 0), Soak: max(o.Soak, 0), Window: o.Window}
	if p.MaxConcurrent <= 0 {
		p.MaxConcurrent = 5
	}
	if p.ProgressDeadline <= 0 {
		p.ProgressDeadline = 10 * time.Minute
	}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: eventnote.For(mgr),
		Policy: p, Beats: beats}
	byTemplate := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return request(templateRuntimeID(o))
	})
	byPod := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return request(o.GetAnnotations()[vocab.AnnotationRuntimeImage])
	})
	return builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		For(&brewletv1.RuntimeImage{}, builder.WithPredicates(targetChanged)).
		Watches(&brewletv1.RuntimeImage{}, slotFreed(mgr.GetClient())).
		Watches(&brewletv1.NodeRuntime{}, handler.EnqueueRequestsFromMapFunc(nodereports.Requests), builder.WithPredicates(reportChanged)).
		Watches(&appsv1.Deployment{}, byTemplate, builder.WithPredicates(workloadChanged)).
		Watches(&appsv1.StatefulSet{}, byTemplate, builder.WithPredicates(workloadChanged)).
		Watches(&appsv1.DaemonSet{}, byTemplate, builder.WithPredicates(workloadChanged)).
		Watches(&corev1.Pod{}, byPod, builder.WithPredicates(podChanged)).
		// The fleet pause (an annotation on RuntimeClass brewlet) holds every RuntimeImage.
		Watches(&nodev1.RuntimeClass{}, fleetpause.EveryRuntimeImage(mgr.GetClient()), builder.WithPredicates(fleetpause.Changes)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, SkipNameValidation: &skipNameValidation}).
		Complete(r)
}

func request(id string) []reconcile.Request {
	if id == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: id}}}
}
