// Package nodeprofile is the NodeProfile controller: it decides which nodes a profile
// serves (pool selection; the older of two overlapping profiles keeps the shared nodes),
// writes each served node's NodeRuntime spec (IDs offered, install mode, containerd mode,
// the generation its rollout wave allows) and keeps the profile's status. Decisions are pure functions of what was read (this file); the reconciler only
// reads, calls Decide and writes.
package nodeprofile

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/nodepool"
	"brewlet.sh/brewlet/internal/operator/nodereports"
	"brewlet.sh/brewlet/internal/operator/rollout"
	"brewlet.sh/brewlet/internal/vocab"
)

// maxNamesInMessage bounds the names a condition message lists, so a large fleet never
// produces an oversized status.
const maxNamesInMessage = 5

// Input is everything one pass read (from the informer caches).
type Input struct {
	Profile  *brewletv1.NodeProfile
	Profiles []brewletv1.NodeProfile // every NodeProfile, Profile included
	Nodes    []corev1.Node
	// Images are the RuntimeImages by name (runtime ID).
	Images map[string]*brewletv1.RuntimeImage
	// Runtimes are the NodeRuntimes by node name.
	Runtimes map[string]*brewletv1.NodeRuntime
	// Accepted are the nodes ("name/uid") whose NodeRetirementEvidence was accepted.
	Accepted map[string]bool
	// Agents: heartbeats and agent pods (nil Fresh: nothing is known, no node is listed).
	Agents AgentFacts
	// FleetPause holds every rotation's waves when set (fleetpause.Of).
	FleetPause string
	Now        metav1.Time
}

// Event is one event the reconciler records on the profile after a successful write.
type Event struct {
	Type    string // corev1.EventTypeNormal or EventTypeWarning
	Reason  vocab.Reason
	Message string
}

// Decision is what one pass makes true.
type Decision struct {
	// Status is the desired status; fields this controller does not own (the cleanup
	// ledger) are kept as read.
	Status brewletv1.NodeProfileStatus
	// Specs are the desired NodeRuntime specs of the nodes this profile serves, by node
	// name. A node absent here is not touched.
	Specs map[string]brewletv1.NodeRuntimeSpec
	// Assigned are the nodes this profile serves, sorted.
	Assigned []string
	// Halted are the runtime IDs whose rotation is halted in this pool.
	Halted []string
	// NextDeadline is the earliest installBy ahead of an installing node (zero: none).
	NextDeadline time.Time
	Events       []Event
	// AddFinalizer: the profile lacks the cleanup finalizer (added before any node is
	// served); ReleaseFinalizer: it is being deleted and no node owes it anything.
	AddFinalizer, ReleaseFinalizer bool
}

// Decide computes the profile's status and its nodes' NodeRuntime specs.
func Decide(in Input) Decision {
	p := in.Profile
	st := *p.Status.DeepCopy()
	d := Decision{Specs: map[string]brewletv1.NodeRuntimeSpec{}}

	// Pool selection with the agent's own rule (nodepool.Select): the node belongs to the
	// oldest matching profile; a newer one that also matches is refused on that node.
	conflicts := map[string][]string{} // older profile -> shared nodes
	var assigned []*corev1.Node
	for i := range in.Nodes {
		n := &in.Nodes[i]
		if !nodepool.Matches(p, n) {
			continue
		}
		owner, _ := nodepool.Select(n, in.Profiles)
		if owner != nil && owner.Name != p.Name {
			conflicts[owner.Name] = append(conflicts[owner.Name], n.Name)
			continue
		}
		assigned = append(assigned, n)
	}
	for _, n := range assigned {
		d.Assigned = append(d.Assigned, n.Name)
	}
	slices.Sort(d.Assigned)

	var unknown []string
	for _, o := range p.Spec.RuntimeImages {
		if in.Images[o.ID] == nil {
			unknown = append(unknown, o.ID)
		}
	}
	slices.Sort(unknown)

	// Per ID: the rollout across this profile's nodes.
	allowed := map[string]map[string]int64{}
	installBy := map[string]map[string]*metav1.Time{}
	pol := rollout.PolicyOf(p.Spec.Rollout, len(assigned))
	for _, o := range p.Spec.RuntimeImages {
		ri := in.Images[o.ID]
		if ri == nil || ri.Status.Epoch != ri.UID {
			continue // no generation of this epoch yet: the agent installs nothing anyway
		}
		t := rollout.TargetOf(ri)
		t.ServedElsewhere = servedOutside(t, in.Runtimes, o.ID, assigned)
		nodes := make([]rollout.Node, 0, len(assigned))
		for _, n := range assigned {
			dir := directive(in.Runtimes[n.Name], o.ID)
			silent := in.Agents.Silent != nil && in.Agents.Silent(n.Name)
			nodes = append(nodes, rollout.Node{Name: n.Name, Allowed: dir.AllowedGeneration, InstallBy: dir.InstallBy,
				Report: report(in.Runtimes[n.Name], o.ID), Silent: silent, Unusable: rollout.UnusableReport(in.Runtimes[n.Name])})
		}
		idPol := pol
		idPol.Paused = ri.Spec.Paused || in.FleetPause != ""
		rd := rollout.Decide(t, nodes, idPol, in.Now.Time)
		allowed[o.ID] = rd.Allowed
		installBy[o.ID] = rd.InstallBy
		if !rd.NextDeadline.IsZero() && (d.NextDeadline.IsZero() || rd.NextDeadline.Before(d.NextDeadline)) {
			d.NextDeadline = rd.NextDeadline
		}
		if rd.Halted {
			d.Halted = append(d.Halted, o.ID)
		}
	}

	mode := p.Spec.ContainerdRestart
	if mode == "" {
		mode = string(vocab.ContainerdRestartValidated)
	}
	ready := 0
	for _, n := range assigned {
		nrt := in.Runtimes[n.Name]
		spec := brewletv1.NodeRuntimeSpec{ContainerdRestart: mode}
		for _, o := range p.Spec.RuntimeImages {
			old := directive(nrt, o.ID)
			install := o.Install
			if install == "" {
				install = string(vocab.InstallEager)
			}
			// Quarantine is another writer's directive (a stalled node); it is kept as read.
			spec.Runtimes = append(spec.Runtimes, brewletv1.RuntimeDirective{ID: o.ID, Install: install,
				AllowedGeneration: allowed[o.ID][n.Name], InstallBy: installBy[o.ID][n.Name],
				Quarantine: old.Quarantine, QuarantineReason: old.QuarantineReason})
		}
		d.Specs[n.Name] = spec
		if nodeReady(nrt, p, in.Images) {
			ready++
		}
	}
	st.ObservedGeneration = p.Generation
	st.AssignedNodes, st.ReadyNodes = int32(len(assigned)), int32(ready)
	st.NodesWithoutAgent, st.NodesWithoutAgentCount = nil, 0
	if in.Agents.Fresh != nil {
		names := make([]string, 0, len(assigned))
		for _, n := range assigned {
			names = append(names, n.Name)
		}
		problems := AgentProblems(names, in.Agents)
		st.NodesWithoutAgentCount = int32(len(problems))
		st.NodesWithoutAgent = problems[:min(len(problems), maxAgentProblems)]
	}

	c := metav1.Condition{Type: string(vocab.ConditionReady), ObservedGeneration: p.Generation, LastTransitionTime: in.Now}
	switch {
	case !nodepool.KeyTrusted(p.Spec.NodePool.Key):
		c.Status, c.Reason = metav1.ConditionFalse, string(vocab.ReasonPoolKeyForgeable)
		c.Message = fmt.Sprintf("pool key %q is one a node's own kubelet can set (or one of Brewlet's own), so any node could join the pool: this profile serves no node. "+
			"Label the pool's nodes with a key under %s (not %s*) and set spec.nodePool.key to it (docs/install.md, \"Node pools\")",
			p.Spec.NodePool.Key, vocab.NodeRestrictionPrefix, vocab.ReservedPoolKeyPrefix)
	case len(conflicts) > 0:
		var parts []string
		for _, older := range sortedKeys(conflicts) {
			nodes := conflicts[older]
			slices.Sort(nodes)
			parts = append(parts, fmt.Sprintf("NodeProfile %s (older) already serves %s", older, names("node", nodes)))
		}
		c.Status, c.Reason = metav1.ConditionFalse, string(vocab.ReasonPoolConflict)
		c.Message = strings.Join(parts, "; ") + "; those nodes stay with the older profile. Make the pools disjoint"
	case len(unknown) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, string(vocab.ReasonUnknownRuntimeImage)
		c.Message = fmt.Sprintf("no RuntimeImage named %s: create it or remove the ID; the other IDs are served", strings.Join(unknown, ", "))
	case ready < len(assigned):
		c.Status, c.Reason = metav1.ConditionFalse, string(vocab.ReasonNodesNotReady)
		c.Message = fmt.Sprintf("%d of %d node(s) report every Eager runtime Ready", ready, len(assigned))
		if st.NodesWithoutAgentCount > 0 {
			c.Message += "; without a running, reporting agent: " + nodereports.ProblemSummary(st.NodesWithoutAgent, st.NodesWithoutAgentCount) + " (status.nodesWithoutAgent)"
		}
	default:
		c.Status, c.Reason = metav1.ConditionTrue, string(vocab.ReasonNodesReady)
		c.Message = fmt.Sprintf("%d of %d node(s) report every Eager runtime Ready", ready, len(assigned))
	}
	if len(d.Halted) > 0 && c.Status == metav1.ConditionTrue {
		c.Message += fmt.Sprintf("; rotation halted for %s", strings.Join(d.Halted, ", "))
	}
	prev := meta.FindStatusCondition(st.Conditions, c.Type)
	if prev == nil || prev.Status != c.Status || prev.Reason != c.Reason {
		typ := corev1.EventTypeNormal
		if c.Reason == string(vocab.ReasonPoolConflict) || c.Reason == string(vocab.ReasonUnknownRuntimeImage) || c.Reason == string(vocab.ReasonPoolKeyForgeable) {
			typ = corev1.EventTypeWarning
		}
		d.Events = append(d.Events, Event{Type: typ, Reason: vocab.Reason(c.Reason), Message: c.Message})
	}
	meta.SetStatusCondition(&st.Conditions, c)

	ld := Ledger(in, d.Assigned, in.Accepted)
	st.Ledger = ld.Ledger
	for _, lc := range []metav1.Condition{ld.Cleanup, ld.Retirement} {
		prev := meta.FindStatusCondition(st.Conditions, lc.Type)
		changed := prev == nil || prev.Status != lc.Status || prev.Reason != lc.Reason
		switch {
		case changed && lc.Reason == string(vocab.ReasonRetirementPending):
			d.Events = append(d.Events, Event{Type: corev1.EventTypeWarning, Reason: vocab.ReasonRetirementPending, Message: lc.Message})
		case changed && prev != nil && lc.Type == string(vocab.ConditionCleanupComplete):
			d.Events = append(d.Events, Event{Type: corev1.EventTypeNormal, Reason: vocab.Reason(lc.Reason), Message: lc.Message})
		}
		meta.SetStatusCondition(&st.Conditions, lc)
	}
	d.AddFinalizer = p.DeletionTimestamp == nil && !controllerutil.ContainsFinalizer(p, vocab.FinalizerCleanup)
	d.ReleaseFinalizer = ld.Release && controllerutil.ContainsFinalizer(p, vocab.FinalizerCleanup)
	d.Status = st
	return d
}

// nodeReady: the node's agent reports every Eager ID the profile offers (and that exists)
// as Ready. OnDemand IDs install at first use and do not count.
func nodeReady(nrt *brewletv1.NodeRuntime, p *brewletv1.NodeProfile, images map[string]*brewletv1.RuntimeImage) bool {
	if nrt == nil {
		return false
	}
	for _, o := range p.Spec.RuntimeImages {
		if o.Install == string(vocab.InstallOnDemand) || images[o.ID] == nil {
			continue
		}
		if r := report(nrt, o.ID); r == nil || r.State != string(vocab.StateReady) {
			return false
		}
	}
	return true
}

func directive(nrt *brewletv1.NodeRuntime, id string) brewletv1.RuntimeDirective {
	if nrt != nil {
		for _, d := range nrt.Spec.Runtimes {
			if d.ID == id {
				return d
			}
		}
	}
	return brewletv1.RuntimeDirective{}
}

// servedOutside counts the nodes outside assigned (other pools) that serve the target of id.
func servedOutside(t rollout.Target, runtimes map[string]*brewletv1.NodeRuntime, id string, assigned []*corev1.Node) int {
	mine := make(map[string]bool, len(assigned))
	for _, n := range assigned {
		mine[n.Name] = true
	}
	served := 0
	for name, nrt := range runtimes {
		if e := report(nrt, id); !mine[name] && e != nil && rollout.PhaseOf(t, rollout.Node{Report: e}) == rollout.PhaseCurrent {
			served++
		}
	}
	return served
}

func report(nrt *brewletv1.NodeRuntime, id string) *brewletv1.NodeRuntimeEntry {
	if nrt != nil {
		for i := range nrt.Status.Runtimes {
			if nrt.Status.Runtimes[i].ID == id {
				return &nrt.Status.Runtimes[i]
			}
		}
	}
	return nil
}

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func names(kind string, xs []string) string {
	if len(xs) <= maxNamesInMessage {
		return kind + "(s) " + strings.Join(xs, ", ")
	}
	return fmt.Sprintf("%s(s) %s and %d more", kind, strings.Join(xs[:maxNamesInMessage], ", "), len(xs)-maxNamesInMessage)
}

// SpecEqual compares NodeRuntime specs as the API server stores them (an empty list and
// no list are the same), so an unchanged decision writes nothing.
func SpecEqual(a, b brewletv1.NodeRuntimeSpec) bool {
	if a.ContainerdRestart != b.ContainerdRestart || len(a.Runtimes) != len(b.Runtimes) {
		return false
	}
	for i := range a.Runtimes {
		x, y := a.Runtimes[i], b.Runtimes[i]
		if !timeEqual(x.InstallBy, y.InstallBy) {
			return false
		}
		x.InstallBy, y.InstallBy = nil, nil
		if x != y {
			return false
		}
	}
	return true
}

// timeEqual compares optional times as the API stores them (whole seconds).
func timeEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Unix() == b.Unix()
}
