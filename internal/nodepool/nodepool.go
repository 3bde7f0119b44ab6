// Package nodepool is the one definition of which NodeProfile a node belongs to, shared by
// the node agent (which profile it obeys) and the operator (which nodes a profile serves),
// so the two can never disagree about a node.
package nodepool

import (
	corev1 "k8s.io/api/core/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

// ControlPlaneLabel marks control-plane nodes, which profiles skip unless they opt in.
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// Matches reports whether the profile's pool contains the node. A profile being deleted
// matches nothing: its nodes are released, not served.
func Matches(p *brewletv1.NodeProfile, node *corev1.Node) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	v, ok := node.Labels[p.Spec.NodePool.Key]
	if !ok {
		return false
	}
	found := false
	for _, n := range p.Spec.NodePool.Names {
		if n == v {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	if _, cp := node.Labels[ControlPlaneLabel]; cp && !p.Spec.NodePool.IncludeControlPlane {
		return false
	}
	return true
}

// Older orders profiles by age: creationTimestamp, then name. The older of two
// overlapping profiles keeps the shared nodes; the newer one is refused (PoolConflict), so
// creating a profile can never take nodes away from one that already serves them.
func Older(a, b *brewletv1.NodeProfile) bool {
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.Name < b.Name
}

// Select returns the profile that owns the node (the oldest whose pool contains it, nil if
// none) and the other matching profiles, which are refused on this node.
func Select(node *corev1.Node, profiles []brewletv1.NodeProfile) (owner *brewletv1.NodeProfile, refused []*brewletv1.NodeProfile) {
	for i := range profiles {
		p := &profiles[i]
		if !Matches(p, node) {
			continue
		}
		switch {
		case owner == nil:
			owner = p
		case Older(p, owner):
			refused = append(refused, owner)
			owner = p
		default:
			refused = append(refused, p)
		}
	}
	return owner, refused
}
