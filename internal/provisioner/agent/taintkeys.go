package agent

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"brewlet.sh/brewlet/internal/vocab"
)

// The startup taint's key check lives here, not in vocab: vocab is linked into the shim,
// which is resident once per pod, and the key check brings Kubernetes' validation package
// (and its package-level state) along.

// clusterAutoscalerStartupPrefix marks a taint the cluster autoscaler treats as a startup
// taint without a flag; the one kubernetes.io key a Brewlet agent may remove.
const clusterAutoscalerStartupPrefix = "startup-taint.cluster-autoscaler.kubernetes.io/"

// ValidStartupTaint refuses a key that is not a taint key, or that lies in a domain
// Kubernetes manages (kubernetes.io, k8s.io and their subdomains: the node lifecycle
// controller's not-ready and unreachable taints, the control-plane taint): an agent told to
// remove one would release nodes Kubernetes holds back. The cluster autoscaler's
// startup-taint prefix is the exception.
func ValidStartupTaint(key string) error {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return vocab.Errorf(vocab.ReasonInvalidStartupTaint, "startup taint %.80q is not a taint key (%s); use a key such as %s", key, strings.Join(errs, "; "), vocab.TaintRuntimeNotReady)
	}
	if strings.HasPrefix(key, clusterAutoscalerStartupPrefix) {
		return nil
	}
	domain, _, ok := strings.Cut(key, "/")
	if !ok {
		return nil
	}
	for _, managed := range []string{"kubernetes.io", "k8s.io"} {
		if domain == managed || strings.HasSuffix(domain, "."+managed) {
			return vocab.Errorf(vocab.ReasonInvalidStartupTaint, "startup taint %q is in %s, a domain Kubernetes manages: the agent removes only taints of its own pool's startup (%s, %s<name> or your own domain)", key, managed, vocab.TaintRuntimeNotReady, clusterAutoscalerStartupPrefix)
		}
	}
	return nil
}
