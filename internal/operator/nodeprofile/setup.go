package nodeprofile

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/eventnote"
	"brewlet.sh/brewlet/internal/operator/fleetpause"
	"brewlet.sh/brewlet/internal/vocab"
)

// ControllerName names the controller in logs, events and controller-runtime's metrics.
const ControllerName = "nodeprofile"

// Setup registers the controller with mgr. NodeProfiles, Nodes, RuntimeImages, NodeRuntimes
// and the RuntimeClass (its fleet pause) are read through the manager's informers. Any change to one of them
// may move a node between profiles, change a rollout wave or a profile's readiness, so each
// wakes every profile (there are few; the work queue folds repeats).
//
// beats and agentNamespace let the status name nodes without a running agent: the agents'
// pods in agentNamespace are read from the API server (not cached: pods there are few, and
// read only while some node's heartbeat is stale).
func Setup(_ context.Context, mgr manager.Manager, skipNameValidation bool, beats Heartbeats, agentNamespace string) error {
	c := mgr.GetClient()
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var ps brewletv1.NodeProfileList
		if err := c.List(ctx, &ps); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(ps.Items))
		for _, p := range ps.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
		return out
	})
	r := &Reconciler{Client: c, Recorder: eventnote.For(mgr), Beats: beats}
	if agentNamespace != "" {
		api := mgr.GetAPIReader()
		r.AgentPods = func(ctx context.Context) ([]corev1.Pod, error) {
			var pods corev1.PodList
			err := api.List(ctx, &pods, client.InNamespace(agentNamespace), client.MatchingLabels(vocab.AgentPodLabels))
			return pods.Items, err
		}
	}
	return builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		For(&brewletv1.NodeProfile{}).
		// Another profile appearing or going changes who owns shared nodes.
		Watches(&brewletv1.NodeProfile{}, all).
		// Node heartbeats change status only: pool membership is in the labels.
		Watches(&corev1.Node{}, all, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&brewletv1.RuntimeImage{}, all).
		Watches(&brewletv1.NodeRuntime{}, all).
		// Accepted retirement evidence resolves ledger entries.
		Watches(&brewletv1.NodeRetirementEvidence{}, all).
		// The fleet pause on RuntimeClass brewlet holds every wave.
		Watches(&nodev1.RuntimeClass{}, all, builder.WithPredicates(fleetpause.Changes)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: &skipNameValidation}).
		Complete(r)
}
