package restarts

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

// Restart metrics on the manager's /metrics, labelled by runtime ID.
var (
	restartsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "brewlet_operator_rotation_restarts",
		Help: "Workloads by restart outcome for the RuntimeImage's current rotation (status.rotation.restartCounts): Pending, InProgress, Succeeded, Failed, Deferred, NotApplicable.",
	}, []string{"id", "outcome"})
	patchesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "brewlet_operator_rotation_restart_patches_total",
		Help: "Barrier patches sent to workloads, by result (applied, refused).",
	}, []string{"id", "result"})
)

func init() { ctrlmetrics.Registry.MustRegister(restartsGauge, patchesTotal) }

// forget drops a RuntimeImage that is gone.
func forget(id string) {
	restartsGauge.DeletePartialMatch(prometheus.Labels{"id": id})
	patchesTotal.DeletePartialMatch(prometheus.Labels{"id": id})
}

// observe exports the counts of one RuntimeImage; every outcome is set, zero included.
func observe(id string, c *brewletv1.RestartCounts) {
	if c == nil {
		c = &brewletv1.RestartCounts{}
	}
	for outcome, n := range map[string]int32{OutcomePending: c.Pending, OutcomeInProgress: c.InProgress, OutcomeSucceeded: c.Succeeded,
		OutcomeFailed: c.Failed, OutcomeDeferred: c.Deferred, OutcomeNotApplicable: c.NotApplicable} {
		restartsGauge.WithLabelValues(id, outcome).Set(float64(n))
	}
}
