// Package nodepool is the one definition of which NodeProfile a node belongs to, shared by
// the node agent (which profile it obeys) and the operator (which nodes a profile serves),
// so the two can never disagree about a node.
package nodepool

import (
	"regexp"
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

// Offering is where a Brewlet pod of runtime id may run, as node-affinity alternatives (a
// node qualifies when it meets every requirement of one of them): one per profile offering
// id, saying what Select says of it in the only labels no node can write about itself: the
// node is in the profile's pool (its key In its names), in no pool of an older profile
// (each such key NotIn its names: the older one owns the node, PoolConflict), and, unless
// the profile includes them, not a control-plane node. A node's own identities can thus
// widen it no more than they can move the node between pools.
//
// Profiles being deleted, those with a pool key a node could forge, and pool names that
// cannot be a label value offer nothing. It is stricter than Select in one corner: a
// control-plane node in the pools of an older profile without IncludeControlPlane and of
// a newer one with it is left out (Select gives it to the newer).
func Offering(profiles []brewletv1.NodeProfile, id string) [][]corev1.NodeSelectorRequirement {
	type pool struct {
		p     *brewletv1.NodeProfile
		names []string
	}
	var live []pool
	for i := range profiles {
		p := &profiles[i]
		if p.DeletionTimestamp != nil || !KeyTrusted(p.Spec.NodePool.Key) {
			continue
		}
		if names := poolNames(p); len(names) > 0 {
			live = append(live, pool{p, names})
		}
	}
	slices.SortFunc(live, func(a, b pool) int {
		if Older(a.p, b.p) {
			return -1
		}
		return 1
	})
	var out [][]corev1.NodeSelectorRequirement
	for i, o := range live {
		if !slices.ContainsFunc(o.p.Spec.RuntimeImages, func(r brewletv1.OfferedRuntime) bool { return r.ID == id }) {
			continue
		}
		key := o.p.Spec.NodePool.Key
		alt := []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: o.names}}
		for _, q := range live[:i] {
			if q.p.Spec.NodePool.Key == key && !slices.ContainsFunc(q.names, func(n string) bool { return slices.Contains(o.names, n) }) {
				continue // disjoint names under one key: never the same node
			}
			alt = append(alt, corev1.NodeSelectorRequirement{Key: q.p.Spec.NodePool.Key, Operator: corev1.NodeSelectorOpNotIn, Values: q.names})
		}
		if !o.p.Spec.NodePool.IncludeControlPlane {
			alt = append(alt, corev1.NodeSelectorRequirement{Key: ControlPlaneLabel, Operator: corev1.NodeSelectorOpDoesNotExist})
		}
		out = append(out, alt)
	}
	return out
}

// poolNames are the profile's pool names that can be a label value, sorted and unique.
func poolNames(p *brewletv1.NodeProfile) []string {
	var out []string
	for _, n := range p.Spec.NodePool.Names {
		if labelValue.MatchString(n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// labelValue is a non-empty Kubernetes label value.
var labelValue = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
