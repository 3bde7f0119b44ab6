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
		Help: "Workloads by restart outcome for the RuntimeImage's current rotation (status.rotation.restarts): Pending, InProgress, Succeeded, Failed, Deferred, NotApplicable.",
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

// observe exports the records of one RuntimeImage; every outcome is set, zero included.
func observe(id string, records []brewletv1.WorkloadRestart) {
	counts := map[string]int{OutcomePending: 0, OutcomeInProgress: 0, OutcomeSucceeded: 0, OutcomeFailed: 0, OutcomeDeferred: 0, OutcomeNotApplicable: 0}
	for _, r := range records {
		counts[r.Outcome]++
	}
	for outcome, n := range counts {
		restartsGauge.WithLabelValues(id, outcome).Set(float64(n))
	}
}
