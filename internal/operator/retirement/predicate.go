package retirement

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// nodeIdentityChanged passes Node creations and deletions and providerID changes: a
// heartbeat changes nothing evidence depends on.
type nodeIdentityChanged struct{ predicate.Funcs }

func (nodeIdentityChanged) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*corev1.Node)
	n, ok2 := e.ObjectNew.(*corev1.Node)
	return !ok1 || !ok2 || o.Spec.ProviderID != n.Spec.ProviderID
}
