package runtimeimage

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// Gauges on the manager's /metrics (controller-runtime's registry), labelled by runtime ID.
// Reconcile errors and durations are controller-runtime's own
// controller_runtime_reconcile_* series (controller="runtimeimage"). docs/observability.md
// lists every series and the alerts built on them.
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
	rotationHeldGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "brewlet_operator_rotation_held",
		Help: "1 while the RuntimeImage's rotation is held for a person, by reason: RotationHalted (nodes failed the target), RestartsHalted (restarted workloads failed), RolledBack (the current generation is a rollback; the spec still names the digest that failed).",
	}, []string{"id", "reason"})
	// Per node and runtime, from the node's last report: an alert compares them with the
	// time of evaluation, so a node whose agent stopped writing is seen without any new
	// write (a hung agent cannot tell on itself).
	authorizedUntilGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "brewlet_operator_node_authorized_until_timestamp_seconds",
		Help: "Until when the node's last report says it is authorized to start containers of the runtime (status.runtimes[].authorizedUntil, Unix seconds).",
	}, []string{"id", "node"})
	reportedAtGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "brewlet_operator_node_authorization_reported_timestamp_seconds",
		Help: "When the node wrote the report carrying that authorization (status.observedAt, Unix seconds): authorized_until minus this is the authorization's lifetime.",
	}, []string{"id", "node"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(generationGauge, approvedGauge, rotationNodesGauge, rotationHeldGauge,
		authorizedUntilGauge, reportedAtGauge)
}

// heldReasons are the label values of brewlet_operator_rotation_held, each always exported
// (0 or 1) so that a rule can tell "not held" from "not known".
var heldReasons = []vocab.Reason{vocab.ReasonRotationHalted, vocab.ReasonRestartsHalted, vocab.ReasonRolledBack}

// observe exports the status as written (or as read when nothing changed) and the
// authorizations of the reports the decision was made from.
func observe(ri *brewletv1.RuntimeImage, reports []brewletv1.NodeRuntime) {
	generationGauge.WithLabelValues(ri.Name).Set(float64(ri.Status.Generation))
	v := 0.0
	if meta.IsStatusConditionTrue(ri.Status.Conditions, string(vocab.ConditionApproved)) {
		v = 1
	}
	approvedGauge.WithLabelValues(ri.Name).Set(v)
	if r := ri.Status.Rotation; r != nil {
		for state, n := range map[string]int32{"current": r.Nodes.Current, "installing": r.Nodes.Installing, "failed": r.Nodes.Failed, "excluded": r.Nodes.Excluded, "stuck": r.Nodes.Stuck} {
			rotationNodesGauge.WithLabelValues(ri.Name, state).Set(float64(n))
		}
	}
	for reason, held := range rotationHeld(&ri.Status) {
		v := 0.0
		if held {
			v = 1
		}
		rotationHeldGauge.WithLabelValues(ri.Name, string(reason)).Set(v)
	}
	observeAuthorizations(ri.Name, reports)
}

// rotationHeld says, per reason of heldReasons, whether the status holds the rotation for it.
func rotationHeld(st *brewletv1.RuntimeImageStatus) map[vocab.Reason]bool {
	held := map[vocab.Reason]bool{}
	for _, r := range heldReasons {
		held[r] = false
	}
	if c := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionRotationProgressing)); c != nil && c.Reason == string(vocab.ReasonRotationHalted) {
		held[vocab.ReasonRotationHalted] = true
	}
	if st.Rotation != nil && st.Rotation.RestartsHalted != nil {
		held[vocab.ReasonRestartsHalted] = true
	}
	if st.RollbackInEffect() != nil {
		held[vocab.ReasonRolledBack] = true
	}
	return held
}

// observeAuthorizations replaces id's per-node series with those of reports: a node that
// left (its NodeRuntime gone, or no longer reporting id) leaves no series behind.
func observeAuthorizations(id string, reports []brewletv1.NodeRuntime) {
	authorizedUntilGauge.DeletePartialMatch(prometheus.Labels{"id": id})
	reportedAtGauge.DeletePartialMatch(prometheus.Labels{"id": id})
	for i := range reports {
		n := &reports[i]
		if n.Status.ObservedAt == nil {
			continue
		}
		for _, e := range n.Status.Runtimes {
			if e.ID != id || e.AuthorizedUntil == nil {
				continue
			}
			authorizedUntilGauge.WithLabelValues(id, n.Name).Set(float64(e.AuthorizedUntil.Unix()))
			reportedAtGauge.WithLabelValues(id, n.Name).Set(float64(n.Status.ObservedAt.Unix()))
		}
	}
}

// forget drops a RuntimeImage that is gone, so deleted IDs do not linger as series.
func forget(id string) {
	generationGauge.DeleteLabelValues(id)
	approvedGauge.DeleteLabelValues(id)
	rotationNodesGauge.DeletePartialMatch(prometheus.Labels{"id": id})
	rotationHeldGauge.DeletePartialMatch(prometheus.Labels{"id": id})
	authorizedUntilGauge.DeletePartialMatch(prometheus.Labels{"id": id})
	reportedAtGauge.DeletePartialMatch(prometheus.Labels{"id": id})
}
