package admission

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/nodepool"
	"brewlet.sh/brewlet/internal/vocab"
)

// Path is where the operator's webhook server serves pod admission.
const Path = "/admit-pods"

// requests counts every admission request this process judged, by outcome. A pod of
// another RuntimeClass never reaches the webhook (the configuration's matchConditions
// keep it away), so it never shows up here; the end-to-end test relies on that.
var requests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "brewlet_operator_pod_admission_requests_total",
	Help: "Pod admission requests judged, by outcome (allowed, denied, error, skipped).",
}, []string{"outcome"})

func init() { metrics.Registry.MustRegister(requests) }

// Handler serves pod admission. Reads go to the manager's cache first and, on a miss, to
// the API server: a RuntimeImage created a moment ago may not be in the cache yet, and
// refusing it as unknown would be wrong.
type Handler struct {
	Cache  client.Reader // the manager's cached client
	Direct client.Reader // the manager's API reader
	// UserNamespaces is the policy for new pods' hostUsers.
	UserNamespaces UserNamespaces
}

var _ admission.Handler = (*Handler)(nil)

// Handle decodes the pod, looks up its RuntimeImage and applies Admit. On CREATE the
// mutations are returned as a JSON patch. On UPDATE of the pods/ephemeralcontainers
// subresource (kubectl debug) the whole pod is judged, and the patch fills the security
// fields of the ephemeral containers being added, nothing else (newEphemeralContainers):
// Pod Security checks them there too.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		requests.WithLabelValues("error").Inc()
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !IsBrewletPod(pod) {
		// The configuration's matchConditions should keep these away; answer harmlessly
		// if a differently configured webhook sends one.
		requests.WithLabelValues("skipped").Inc()
		return admission.Allowed("not a Brewlet pod")
	}
	ri, err := h.lookup(ctx, pod)
	if err != nil {
		requests.WithLabelValues("error").Inc()
		return admission.Errored(http.StatusInternalServerError, err)
	}
	placements, err := h.offering(ctx, ri)
	if err != nil {
		requests.WithLabelValues("error").Inc()
		return admission.Errored(http.StatusInternalServerError, err)
	}
	d := Admit(pod, ri, placements)
	if !d.Allowed() {
		requests.WithLabelValues("denied").Inc()
		return admission.Denied(d.Message()).WithWarnings(d.Warnings...)
	}
	var target *corev1.Pod
	switch {
	case req.Operation == admissionv1.Create:
		var denial string
		if target, denial = applyUserNamespaces(h.UserNamespaces, d.Pod); denial != "" {
			requests.WithLabelValues("denied").Inc()
			return admission.Denied(denial).WithWarnings(d.Warnings...)
		}
	case req.Operation == admissionv1.Update && req.SubResource == "ephemeralcontainers":
		old := &corev1.Pod{}
		if len(req.OldObject.Raw) > 0 {
			if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
				return admission.Errored(http.StatusBadRequest, err)
			}
		}
		if target, err = newEphemeralContainers(pod, d.Pod, old); err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
	default:
		// Not an operation the configuration sends; judged, never changed.
		requests.WithLabelValues("allowed").Inc()
		return admission.Allowed("").WithWarnings(d.Warnings...)
	}
	requests.WithLabelValues("allowed").Inc()
	out, err := json.Marshal(target)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, out).WithWarnings(d.Warnings...)
}

// lookup returns the RuntimeImage the pod names, nil when the name is missing, invalid
// (Admit reports both) or does not exist.
func (h *Handler) lookup(ctx context.Context, pod *corev1.Pod) (*brewletv1.RuntimeImage, error) {
	id, ok := RuntimeImageID(pod)
	if !ok || vocab.ValidateRuntimeID(id) != nil {
		return nil, nil
	}
	ri := &brewletv1.RuntimeImage{}
	err := h.Cache.Get(ctx, types.NamespacedName{Name: id}, ri)
	if apierrors.IsNotFound(err) && h.Direct != nil {
		err = h.Direct.Get(ctx, types.NamespacedName{Name: id}, ri)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return ri, nil
}

// offering returns where the NodeProfiles offering ri place it (none when ri is nil). A
// profile created a moment ago may not be in the cache yet: when the cache shows no offer,
// the API server is asked before the pod is refused.
func (h *Handler) offering(ctx context.Context, ri *brewletv1.RuntimeImage) ([][]corev1.NodeSelectorRequirement, error) {
	if ri == nil {
		return nil, nil
	}
	var profiles brewletv1.NodeProfileList
	// Offering only reads the profiles (and copies what it keeps): no deep copy per pod.
	if err := h.Cache.List(ctx, &profiles, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	placements := nodepool.Offering(profiles.Items, ri.Name)
	if len(placements) > 0 || h.Direct == nil {
		return placements, nil
	}
	if err := h.Direct.List(ctx, &profiles); err != nil {
		return nil, err
	}
	return nodepool.Offering(profiles.Items, ri.Name), nil
}
