package runtimeimage

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// Gauges on the manager's /metrics (controller-runtime's registry), labelled by runtime ID.
// Reconcile errors and durations are controller-runtime's own
// controller_runtime_reconcile_* series (controller="runtimeimage").
var (
	generationGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "brewlet_operator_runtime_image_generation",
		Help: "Current generation of each RuntimeImage in its epoch (status.generation).",
	}, []string{"id"})
	approvedGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "brewlet_operator_runtime_image_approved",
		Help: "1 when the RuntimeImage's Approved condition is True, 0 when it is revoked or being deleted.",
	}, []string{"id"})
	rotationNodesGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "brewlet_operator_rotation_nodes",
		Help: "Nodes by state towards the RuntimeImage's target generation (status.rotation.nodes): current, installing, failed, excluded (failed or stuck), stuck.",
	}, []string{"id", "state"})
)

func init() { ctrlmetrics.Registry.MustRegister(generationGauge, approvedGauge, rotationNodesGauge) }

// observe exports the status as written (or as read when nothing changed).
func observe(ri *brewletv1.RuntimeImage) {
	generationGauge.WithLabelValues(ri.Name).Set(float64(ri.Status.Generation))
	v := 0.0
	for _, c := range ri.Status.Conditions {
		if c.Type == string(vocab.ConditionApproved) && c.Status == "True" {
			v = 1
		}
	}
	approvedGauge.WithLabelValues(ri.Name).Set(v)
	if r := ri.Status.Rotation; r != nil {
		for state, n := range map[string]int32{"current": r.Nodes.Current, "installing": r.Nodes.Installing, "failed": r.Nodes.Failed, "excluded": r.Nodes.Excluded, "stuck": r.Nodes.Stuck} {
			rotationNodesGauge.WithLabelValues(ri.Name, state).Set(float64(n))
		}
	}
}

// forget drops a RuntimeImage that is gone, so deleted IDs do not linger as series.
func forget(id string) {
	generationGauge.DeleteLabelValues(id)
	approvedGauge.DeleteLabelValues(id)
	rotationNodesGauge.DeletePartialMatch(prometheus.Labels{"id": id})
}
