// Package nodepool is the one definition of which NodeProfile a node belongs to, shared by
// the node agent (which profile it obeys) and the operator (which nodes a profile serves),
// so the two can never disagree about a node.
package nodepool

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// ControlPlaneLabel marks control-plane nodes, which profiles skip unless they opt in.
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// KeyTrusted reports whether a pool key is one no node can set on itself: under
// node-restriction.kubernetes.io/, which the NodeRestriction admission plugin forbids
// kubelets to write on their own Node, and not one of Brewlet's own keys there, which the
// node's agent writes. A pool key a kubelet could set would let any node join the pool,
// receive an agent and its token, and attract the pool's Brewlet pods and their Secrets.
func KeyTrusted(key string) bool {
	return strings.HasPrefix(key, vocab.NodeRestrictionPrefix) && len(key) > len(vocab.NodeRestrictionPrefix) &&
		!strings.HasPrefix(key, vocab.ReservedPoolKeyPrefix)
}

// Matches reports whether the profile's pool contains the node. A profile being deleted
// matches nothing: its nodes are released, not served; nor does one whose pool key a node
// could forge (KeyTrusted; stored by a release that allowed it).
func Matches(p *brewletv1.NodeProfile, node *corev1.Node) bool {
	if p.DeletionTimestamp != nil || !KeyTrusted(p.Spec.NodePool.Key) {
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

// Offering returns the pools whose profiles offer runtime id, as pool key -> pool names
// (sorted, unique): what a Brewlet pod of that runtime may be placed on. Profiles being
// deleted and those with a pool key a node could forge offer nothing, so no node's own
// identity can widen it.
func Offering(profiles []brewletv1.NodeProfile, id string) map[string][]string {
	out := map[string][]string{}
	for i := range profiles {
		p := &profiles[i]
		if p.DeletionTimestamp != nil || !KeyTrusted(p.Spec.NodePool.Key) {
			continue
		}
		if !slices.ContainsFunc(p.Spec.RuntimeImages, func(o brewletv1.OfferedRuntime) bool { return o.ID == id }) {
			continue
		}
		out[p.Spec.NodePool.Key] = append(out[p.Spec.NodePool.Key], p.Spec.NodePool.Names...)
	}
	for k, names := range out {
		slices.Sort(names)
		out[k] = slices.Compact(names)
	}
	return out
}
