package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/nodepool"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/provisioner/writer"
	"brewlet.sh/brewlet/internal/vocab"
)

// controlPlaneLabel marks control-plane nodes, which profiles skip unless they opt in.
const controlPlaneLabel = nodepool.ControlPlaneLabel

// SelectProfile returns the NodeProfile whose pool contains the node, nil if none does.
// When several do, the oldest (creationTimestamp, then name) keeps the node and the error
// is a PoolConflict naming the others: the agent keeps serving what the older profile
// offers (creating an overlapping profile never revokes serving nodes) and the operator
// refuses the newer profile with the same rule (internal/nodepool).
func SelectProfile(node *corev1.Node, profiles []brewletv1.NodeProfile) (*brewletv1.NodeProfile, error) {
	owner, refused := nodepool.Select(node, profiles)
	if len(refused) == 0 {
		return owner, nil
	}
	names := make([]string, len(refused))
	for i, p := range refused {
		names[i] = p.Name
	}
	sort.Strings(names)
	return owner, vocab.Errorf(vocab.ReasonPoolConflict, "node %s is also in the pools of the newer NodeProfiles %s, which are refused here; %s keeps the node. Make the pools disjoint", node.Name, strings.Join(names, ", "), owner.Name)
}

// Target is what the node should do with one runtime ID.
type Target struct {
	ID         string
	Install    string // Eager or OnDemand
	Epoch      string
	Generation int64
	Image      string // registry/repo@digest of the generation
	UID, GID   int64
	// Verification: the RuntimeImage's spec.verification (install.VerificationOf).
	Verification string
	// AcceptBreaking: the digest spec.compatibility.acceptBreaking accepts ("": none).
	AcceptBreaking string
	// Rollback: the generation serves an earlier one's digest again after a generation
	// failed workloads (RuntimeImageStatus.RollbackInEffect): it is not held to the promise
	// of the generation it replaces, which broke the promise the node kept before.
	Rollback bool
	Revoke   bool // withdraw: labels off, authorization revoked
	Reason   vocab.Reason
	Message  string
}

// Targets decides, per ID the profile offers and per ID the node still holds, whether to
// install and authorize it or to revoke it. Only what the API server says now counts.
func Targets(profile *brewletv1.NodeProfile, images map[string]*brewletv1.RuntimeImage, spec brewletv1.NodeRuntimeSpec, held []string) []Target {
	offered := map[string]string{}
	if profile != nil {
		for _, o := range profile.Spec.RuntimeImages {
			offered[o.ID] = o.Install
		}
	}
	directives := map[string]brewletv1.RuntimeDirective{}
	for _, d := range spec.Runtimes {
		directives[d.ID] = d
	}
	ids := map[string]bool{}
	for id := range offered {
		ids[id] = true
	}
	for _, id := range held {
		ids[id] = true
	}
	var out []Target
	for id := range ids {
		out = append(out, target(id, offered, images[id], directives[id]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func target(id string, offered map[string]string, ri *brewletv1.RuntimeImage, d brewletv1.RuntimeDirective) Target {
	t := Target{ID: id, Install: offered[id]}
	revoke := func(r vocab.Reason, format string, args ...any) Target {
		t.Revoke, t.Reason, t.Message = true, r, fmt.Sprintf(format, args...)
		return t
	}
	if _, ok := offered[id]; !ok {
		return revoke(vocab.ReasonRuntimeImageRevoked, "no NodeProfile offers %s on this node any more", id)
	}
	if ri == nil {
		return revoke(vocab.ReasonUnknownRuntimeImage, "RuntimeImage %s does not exist", id)
	}
	if ri.DeletionTimestamp != nil {
		return revoke(vocab.ReasonRuntimeImageRevoked, "RuntimeImage %s is being deleted", id)
	}
	// The kill switch works without brewlet-operator: the node reads spec.revoked itself, so
	// an operator that is down (or slow to write Approved=False) cannot keep a revoked
	// runtime authorized.
	if ri.Spec.Revoked {
		return revoke(vocab.ReasonRuntimeImageRevoked, "RuntimeImage %s is revoked (spec.revoked is true): no new container starts with it; set spec.revoked to false to re-approve", id)
	}
	approved := meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionApproved))
	if approved != nil && approved.Status == metav1.ConditionFalse {
		return revoke(vocab.ReasonRuntimeImageRevoked, "RuntimeImage %s is not approved: %s", id, approved.Message)
	}
	if d.Quarantine {
		return revoke(vocab.ReasonRuntimeImageRevoked, "the operator quarantined %s on this node: %s", id, d.QuarantineReason)
	}
	st := ri.Status
	if st.Generation < 1 || string(st.Epoch) != string(ri.UID) || st.Digest == "" {
		return revoke(vocab.ReasonRuntimeImageNotInstalled, "RuntimeImage %s has no generation assigned by brewlet-operator yet", id)
	}
	// brewlet-operator writes Approved with every generation it assigns: a generation
	// without Approved=True (condition removed, Unknown, a status written by someone else)
	// is not an approval.
	if approved == nil || approved.Status != metav1.ConditionTrue {
		return revoke(vocab.ReasonRuntimeImageRevoked, "RuntimeImage %s carries no Approved=True condition from brewlet-operator for generation %d: not approved; check that brewlet-operator runs (kubectl get runtimeimage %s -o yaml)", id, st.Generation, id)
	}
	t.Epoch, t.Generation, t.UID, t.GID = string(ri.UID), st.Generation, ri.Spec.User.UID, ri.Spec.User.GID
	t.Verification = install.VerificationOf(ri.Spec.Verification)
	if c := ri.Spec.Compatibility; c != nil {
		t.AcceptBreaking = c.AcceptBreaking
	}
	if d.ID == "" && st.Generation > 1 && !rotationCompleted(st) {
		// brewlet-operator has written no directive for this ID on this node yet (a node that
		// just joined the pool, an operator that is down). A generation the fleet has not
		// finished rolling out may be paused, halted or held back by waves: the node takes
		// nothing newer on its own, keeps serving what it has, and waits for the directive.
		return t
	}
	if d.AllowedGeneration > 0 && st.Generation > d.AllowedGeneration {
		// This node's rollout wave has not reached the new generation: keep serving the
		// generation it has, install nothing (Image stays empty).
		t.Generation = d.AllowedGeneration
		return t
	}
	// The pull reference is the source the generation was assigned from. The API records
	// only its digest, so spec.source.image names it only while its digest is that
	// digest; after a rotation to another repository, before brewlet-operator assigned the
	// new generation, "new repository @ old digest" is not what was approved (and may
	// not exist): install nothing until the status catches up.
	t.Rollback = st.RollbackInEffect() != nil
	_, digest, _ := strings.Cut(ri.Spec.Source.Image, "@")
	switch {
	case digest == st.Digest:
		t.Image = ri.Spec.Source.Image
	case t.Rollback && digest == st.RolledBack.Bad.Digest:
		// A rollback: the spec still names the digest that failed, the status the one
		// before it. A node that has it installed moves no byte (install.Installer finds it);
		// one that has not pulls it from where that generation came from.
		t.Image = st.RolledBack.To.PullFrom(ri.Spec.Source.Image)
	}
	return t
}

// rotationCompleted says whether the fleet finished rolling out the current generation:
// the operator recorded its rotation complete (RotationCompletedAt, set once per target).
func rotationCompleted(st brewletv1.RuntimeImageStatus) bool {
	r := st.Rotation
	return r != nil && r.Target.Generation == st.Generation && r.Target.Digest == st.Digest && r.RotationCompletedAt != nil
}

// Labels are the node's Brewlet labels for the states of its runtimes. The node can
// start Brewlet containers (vocab.LabelRuntime=ready, mirrored for people in
// vocab.LabelRuntimeInfo) when any ID is ready or offered on demand (the shim has it
// installed at first use).
func Labels(states map[string]vocab.RuntimeState) map[string]string {
	out := map[string]string{}
	for id, s := range states {
		switch s {
		case vocab.StateReady:
			out[vocab.RuntimeLabel(id)] = vocab.LabelValueReady
		case vocab.StateAvailable:
			out[vocab.RuntimeLabel(id)] = vocab.LabelValueAvailable
		default:
			continue
		}
		out[vocab.LabelRuntime] = vocab.LabelValueReady
		out[vocab.LabelRuntimeInfo] = vocab.LabelValueReady
	}
	return out
}

// RetryDue decides whether the install of a generation that ended at `at` with err runs
// again now. A refusal of the content (any reason but a pull failure or altered bytes from
// a source) is final for that digest: the same bytes are refused again. A pull failure, or
// an install that succeeded yet is not current any more, is retried after pause; a
// cancelled one (its lease or its target went away) at once.
func RetryDue(err error, at, now time.Time, pause time.Duration) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, writer.ErrNotWriter) {
		return true
	}
	if !install.Refused(err) {
		return now.Sub(at) >= pause
	}
	return false // the content was refused
}

// StartupTaintsDue decides whether the node's startup taints may go: the node can start
// Brewlet containers (some ID is ready or offered on demand, so Labels steers pods here)
// and no ID is still installing, so the pods an autoscaler added the node for find every
// runtime they were promised. A failed or revoked ID does not hold the node back: it gets
// no label, and no pod is steered to it.
func StartupTaintsDue(states map[string]vocab.RuntimeState) bool {
	usable := false
	for _, s := range states {
		switch s {
		case vocab.StateInstalling:
			return false
		case vocab.StateReady, vocab.StateAvailable:
			usable = true
		}
	}
	return usable
}
