package retirement

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/eventnote"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "retirement"

// Reconciler writes each NodeRetirementEvidence's phase.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
}

// Reconcile decides one evidence's phase from the ledgers and Nodes in the cache.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	e := &brewletv1.NodeRetirementEvidence{}
	if err := r.Client.Get(ctx, req.NamespacedName, e); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var profiles brewletv1.NodeProfileList
	if err := r.Client.List(ctx, &profiles); err != nil {
		return reconcile.Result{}, err
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return reconcile.Result{}, err
	}
	now := time.Now()
	phase, msg := Decide(e, profiles.Items, nodes.Items, now)
	var res reconcile.Result
	if phase == brewletv1.EvidenceBlocked && e.Spec.RetiredAt.After(now) {
		res.RequeueAfter = e.Spec.RetiredAt.Sub(now) + time.Second // the time passes without any object changing
	}
	if e.Status.Phase == phase && e.Status.Message == msg {
		return res, nil
	}
	e.Status.Phase, e.Status.Message = phase, msg
	if err := r.Client.Status().Update(ctx, e); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.Recorder != nil {
		typ := corev1.EventTypeNormal
		if phase == brewletv1.EvidenceBlocked {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(e, nil, typ, phase, "ReconcileNodeRetirementEvidence", "%s", msg)
	}
	return res, nil
}

// Setup registers the controller: ledgers and Nodes changing re-decide every evidence
// (there are few).
func Setup(mgr manager.Manager, skipNameValidation bool) error {
	c := mgr.GetClient()
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var es brewletv1.NodeRetirementEvidenceList
		if err := c.List(ctx, &es); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(es.Items))
		for _, e := range es.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: e.Name}})
		}
		return out
	})
	return builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		For(&brewletv1.NodeRetirementEvidence{}).
		Watches(&brewletv1.NodeProfile{}, all).
		Watches(&corev1.Node{}, all, builder.WithPredicates(nodeIdentityChanged{})).
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		Complete(&Reconciler{Client: c, Recorder: eventnote.For(mgr)})
}
