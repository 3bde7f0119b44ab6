package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

// Names of the objects pod admission consists of. The Helm chart (issue 10) templates
// the same configuration; ConfigurationName is also what the operator patches the CA
// bundle of.
const (
	ConfigurationName = "brewlet-pod-admission"
	WebhookName       = "pods.node.brewlet.sh"
	SecretName        = "brewlet-pod-admission-tls"
	ServiceName       = "brewlet-pod-admission"
	// TimeoutSeconds is short because pod creation waits for it (controllers retry).
	TimeoutSeconds = 5
)

// MatchCondition is the CEL expression that scopes the webhook to Brewlet pods. An object
// selector cannot (it sees labels only, and runtimeClassName is a spec field). has() first:
// reading an unset field is a CEL error, and with failurePolicy Fail an error would refuse
// every pod without a RuntimeClass in the cluster.
const MatchCondition = "has(object.spec.runtimeClassName) && object.spec.runtimeClassName == '" + vocab.RuntimeClassName + "'"

// ClientConfig says where the API server reaches the webhook: a Service (in a cluster) or
// a URL (tests: a loopback operator).
type ClientConfig struct {
	ServiceNamespace, ServiceName string
	ServicePort                   int32
	URL                           string
	CABundle                      []byte
}

// Configuration is the MutatingWebhookConfiguration for pod admission.
//
// failurePolicy Fail: a Brewlet pod admitted without the checks would run without its
// node affinity and default user, and fail on the node instead. The matchCondition keeps
// every other pod of the cluster independent of the webhook's availability. Pods are
// judged on CREATE, and on UPDATE of the ephemeralcontainers subresource (kubectl debug
// adds containers to a running pod). reinvocationPolicy IfNeeded: another webhook that
// adds a container after this one runs gets it judged too.
func Configuration(cc ClientConfig) *admissionregistrationv1.MutatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	ifNeeded := admissionregistrationv1.IfNeededReinvocationPolicy
	scope := admissionregistrationv1.NamespacedScope
	timeout := int32(TimeoutSeconds)
	wc := admissionregistrationv1.WebhookClientConfig{CABundle: cc.CABundle}
	if cc.URL != "" {
		u := cc.URL
		wc.URL = &u
	} else {
		path, port := Path, cc.ServicePort
		if port == 0 {
			port = 443
		}
		wc.Service = &admissionregistrationv1.ServiceReference{
			Namespace: cc.ServiceNamespace, Name: cc.ServiceName, Path: &path, Port: &port}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         WebhookName,
			ClientConfig: wc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods"}, Scope: &scope},
			}, {
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods/ephemeralcontainers"}, Scope: &scope},
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "brewlet-runtime-class", Expression: MatchCondition}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &ifNeeded,
		}},
	}
}
