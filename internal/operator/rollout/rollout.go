// Package rollout decides, for one runtime ID across the nodes of one NodeProfile, which
// generation each node may install (NodeRuntime spec.runtimes[].allowedGeneration): new
// generations reach the pool in waves of rollout.maxUnavailable nodes, and a generation
// that more than rollout.maxFailures nodes fail reaches no further node. Pure: the
// NodeProfile controller calls it with what it read and writes the result.
package rollout

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// DefaultMaxFailures is rollout.maxFailures when the profile does not set it.
const DefaultMaxFailures = 1

// DefaultNodeTimeout is rollout.nodeTimeout when the profile does not set it: an install
// is bounded by the agent's own deadline (a few minutes) and retried, so a node that has
// neither served nor failed the generation after this long is not going to soon.
const DefaultNodeTimeout = 10 * time.Minute

// Policy is a profile's rollout policy resolved for a pool of a given size.
type Policy struct {
	// MaxUnavailable is how many nodes may be installing the target at once (at least 1).
	MaxUnavailable int
	// MaxFailures is how many nodes may fail the target before the rotation halts.
	MaxFailures int
	// NodeTimeout is how long an allowed node may take before it is excluded (NodeTimedOut).
	NodeTimeout time.Duration
	// Paused (the RuntimeImage's spec.paused): no waiting node is let through.
	Paused bool
}

// PolicyOf resolves rollout for a pool of poolSize nodes. maxUnavailable defaults to the
// whole pool; a percentage is of the pool, rounded up; anything below 1 becomes 1 (a wave
// of no node would never finish the rotation).
func PolicyOf(r *brewletv1.RolloutPolicy, poolSize int) Policy {
	p := Policy{MaxUnavailable: poolSize, MaxFailures: DefaultMaxFailures, NodeTimeout: DefaultNodeTimeout}
	if r != nil && r.MaxUnavailable != nil {
		if v, err := intstr.GetScaledValueFromIntOrPercent(r.MaxUnavailable, poolSize, true); err == nil {
			p.MaxUnavailable = v
		}
	}
	if r != nil && r.MaxFailures != nil {
		p.MaxFailures = int(*r.MaxFailures)
	}
	if r != nil && r.NodeTimeout != nil && r.NodeTimeout.Duration > 0 {
		p.NodeTimeout = r.NodeTimeout.Duration
	}
	if p.MaxUnavailable < 1 {
		p.MaxUnavailable = 1
	}
	if p.MaxFailures < 0 {
		p.MaxFailures = 0
	}
	return p
}

// Target is the RuntimeImage's current generation within its epoch.
type Target struct {
	Epoch      types.UID
	Generation int64
	// Digest is the target generation's digest ("": not checked): a node reporting that
	// generation as served under another digest is not believed.
	Digest string
	// ServedElsewhere counts the nodes of other pools that serve the target (Halted).
	ServedElsewhere int
	// Rollback: the target serves an earlier generation's digest again after a generation
	// failed workloads (RuntimeImageStatus.RollbackInEffect). Every node is allowed it at
	// once, whatever the waves, a halt or a pause say: it moves nodes back to what they
	// served, from what they have installed.
	Rollback bool
}

// TargetOf is the rollout target of a RuntimeImage's current generation.
func TargetOf(ri *brewletv1.RuntimeImage) Target {
	return Target{Epoch: ri.UID, Generation: ri.Status.Generation, Digest: ri.Status.Digest, Rollback: ri.Status.RollbackInEffect() != nil}
}

// Node is one assigned node as read: the allowed generation its NodeRuntime spec holds for
// the ID (0: none written) with its installBy, the entry its agent reports for the ID
// (nil: none), and whether its agent is silent (its heartbeat is stale).
type Node struct {
	Name      string
	Allowed   int64
	InstallBy *metav1.Time
	Report    *brewletv1.NodeRuntimeEntry
	Silent    bool
	// Unusable says why the node's report as a whole cannot be used ("": it can).
	Unusable string
}

// MaxUIDLength bounds a UID a node reports (Kubernetes UIDs are 36 characters).
const MaxUIDLength = 128

// NodeOf is what a NodeRuntime says about its entry e for PhaseAt: the allowance and
// installBy its spec holds for e's ID, the entry, and whether silent says its agent stopped.
func NodeOf(nrt *brewletv1.NodeRuntime, e *brewletv1.NodeRuntimeEntry, silent func(node string) bool) Node {
	n := Node{Name: nrt.Name, Report: e, Silent: silent != nil && silent(nrt.Name), Unusable: UnusableReport(nrt)}
	for _, d := range nrt.Spec.Runtimes {
		if d.ID == e.ID {
			n.Allowed, n.InstallBy = d.AllowedGeneration, d.InstallBy
		}
	}
	return n
}

// UnusableReport says why a node's report as a whole cannot be used ("": it can, or there
// is none): it does not say when it was observed, or its node UID is malformed. Both
// controllers reading reports judge them by it.
func UnusableReport(nrt *brewletv1.NodeRuntime) string {
	switch {
	case nrt == nil:
		return ""
	case nrt.Status.ObservedAt == nil || nrt.Status.ObservedAt.IsZero():
		return "the report says no observedAt"
	case len(nrt.Status.NodeUID) > MaxUIDLength:
		return "the report's nodeUID is malformed"
	}
	return ""
}

// Phase is where one node stands in the rotation to the target.
type Phase string

const (
	PhaseCurrent    Phase = "Current"    // serves the target (Ready or Available)
	PhaseInstalling Phase = "Installing" // allowed the target, not serving it yet
	PhaseFailed     Phase = "Failed"     // reported Failed for the target
	PhaseWaiting    Phase = "Waiting"    // not allowed the target yet (a later wave)
	// PhaseStuck: allowed the target but neither serving nor failing it past its installBy,
	// or installing or waiting while its agent is silent. Excluded from the rotation: it
	// takes no wave slot, counts no failure, and rejoins when it reports.
	PhaseStuck Phase = "Stuck"
)

// Decision is the allowed generation per node and the rotation's state.
type Decision struct {
	// Allowed is the allowedGeneration to write per node name; 0 (only while the
	// RuntimeImage has no generation) means "the current generation", which is also what
	// the agent does without a directive.
	Allowed map[string]int64
	// InstallBy is the installBy to write with Allowed per node (nil: none): kept while
	// the allowance stays, now+NodeTimeout when it is raised.
	InstallBy map[string]*metav1.Time
	Phases    map[string]Phase
	// Halted: more than MaxFailures nodes failed the target, more than serve it (Halted); no
	// further node is allowed it.
	Halted bool
	// Failed are the nodes that failed the target, sorted.
	Failed []string
	// Stuck are the nodes excluded as stuck, with why (StuckReason).
	Stuck map[string]vocab.Reason
	// NextDeadline is the earliest installBy still ahead of a node that is installing
	// (zero: none): time passing changes no object, so the caller looks again then.
	NextDeadline time.Time
}

// PhaseOf classifies a node against the target. A report of the target as failed
// (failedGeneration) counts as a failure; a report of another epoch or another
// generation says nothing about the target; a node already allowed the target (or
// reporting its install) counts as installing until it reports the outcome.
func PhaseOf(t Target, n Node) Phase {
	if r := n.Report; r != nil && r.Epoch == t.Epoch && r.FailedGeneration == t.Generation {
		// The node refused the target's content and keeps serving an older generation.
		return PhaseFailed
	}
	if r := n.Report; r != nil && r.Epoch == t.Epoch && r.Generation == t.Generation {
		switch vocab.RuntimeState(r.State) {
		case vocab.StateReady, vocab.StateAvailable:
			return PhaseCurrent
		case vocab.StateFailed:
			return PhaseFailed
		case vocab.StateInstalling:
			return PhaseInstalling
		}
	}
	if n.Allowed >= t.Generation {
		return PhaseInstalling
	}
	return PhaseWaiting
}

// PhaseAt is PhaseOf with the node's deadline and heartbeat applied at now: a node that
// would be installing past its installBy, or installing or waiting with a silent agent,
// is stuck. StuckReason says which.
func PhaseAt(t Target, n Node, now time.Time) Phase {
	if Unbelievable(t, n) != "" {
		return PhaseStuck
	}
	ph := PhaseOf(t, n)
	switch {
	case ph == PhaseInstalling && n.Silent, ph == PhaseWaiting && n.Silent:
		return PhaseStuck
	case ph == PhaseInstalling && n.InstallBy != nil && now.After(n.InstallBy.Time):
		return PhaseStuck
	}
	return ph
}

// Unbelievable says why a node's report cannot be counted for the target ("": it can): the
// report as a whole is unusable, or its entry claims a generation of the target's epoch the
// operator never assigned, or serves the target generation under another digest. A node's
// report is its own claim; one that cannot be true is treated like a silent agent's
// (excluded as stuck: no wave slot, no failure counted, no serving counted) until it
// reports something believable.
func Unbelievable(t Target, n Node) string {
	r := n.Report
	if r == nil {
		return "" // nothing reported yet (a node that just joined): nothing to disbelieve
	}
	if n.Unusable != "" {
		return n.Unusable
	}
	if r.Epoch != t.Epoch {
		return ""
	}
	switch {
	case r.Generation > t.Generation || r.FailedGeneration > t.Generation:
		return fmt.Sprintf("the report claims generation %d, past the %d assigned", max(r.Generation, r.FailedGeneration), t.Generation)
	case r.Generation < 0 || r.FailedGeneration < 0:
		return "the report claims a negative generation"
	case t.Digest != "" && r.Generation == t.Generation && r.Digest != "" && r.Digest != t.Digest &&
		(r.State == string(vocab.StateReady) || r.State == string(vocab.StateAvailable)):
		return fmt.Sprintf("the report serves generation %d as %s, not %s", t.Generation, r.Digest, t.Digest)
	}
	return ""
}

// StuckReason is why PhaseAt found n stuck: ReportInvalid (Unbelievable), AgentNotReporting
// (silent) or NodeTimedOut.
func StuckReason(t Target, n Node) vocab.Reason {
	if Unbelievable(t, n) != "" {
		return vocab.ReasonReportInvalid
	}
	if n.Silent {
		return vocab.ReasonAgentNotReporting
	}
	return vocab.ReasonNodeTimedOut
}

// Halted reports whether the target's content stands refused: more nodes failed it than the
// budget allows, and more nodes failed it than serve it. A refusal of content is a verdict on
// bytes every node checks alike, so nodes' reports can only disagree when some are broken or
// lie: the larger side is believed. One or two nodes claiming failures cannot stop a patch the
// rest of the fleet serves (they keep their generation and are excluded), and one node claiming
// to serve a digest the others refuse cannot keep it rolling (restarted pods would otherwise
// be steered off every node that refused it, onto the one that claims it).
func Halted(failed, current int, p Policy) bool { return failed > p.MaxFailures && failed > current }

// Decide lets waiting nodes through in waves: as many as MaxUnavailable minus the nodes
// installing now, in name order (stable, so a pass repeated over the same reads decides
// the same wave). Once the rotation halts, no waiting node is let through; nodes already
// let through keep their allowance (a finished install stays; the agent does not retry a
// refused digest). A new digest is a new target generation with no failures: the waves
// start again from the nodes that are not on it.
//
// A waiting node is held at the generation it serves, or at the allowance it already had,
// or at target-1. The first generation of an epoch is not staged (there is nothing to keep
// serving and no way to say "none" in allowedGeneration): every node is allowed it
// explicitly, never left at 0, so that a second generation assigned before a node's
// first report finds the node held at 1 rather than reading 0 as "current" and skipping
// the waves.
//
// A stuck node (PhaseAt) keeps what it was allowed but takes no slot: one node whose agent
// died or whose install never ends must not hold the next wave back. A silent node that is
// still waiting goes through the waves like any other: let through, it is stuck (and frees
// its slot) on the next pass, and its agent installs the generation when it returns. (Holding
// it instead would stall every rotation of a cluster whose operator watches the wrong Lease
// namespace, since every node would look silent.)
func Decide(t Target, nodes []Node, p Policy, now time.Time) Decision {
	d := Decision{Allowed: map[string]int64{}, InstallBy: map[string]*metav1.Time{}, Phases: map[string]Phase{}, Stuck: map[string]vocab.Reason{}}
	if t.Generation < 1 {
		for _, n := range nodes {
			d.Allowed[n.Name] = 0
		}
		return d
	}
	// Whole seconds: the API stores no finer, and a kept deadline must compare equal.
	deadline := &metav1.Time{Time: now.Add(p.NodeTimeout).Truncate(time.Second)}
	allow := func(n Node) {
		d.Allowed[n.Name] = t.Generation
		d.InstallBy[n.Name] = n.InstallBy
		if n.Allowed != t.Generation || n.InstallBy == nil {
			d.InstallBy[n.Name] = deadline
		}
	}
	installing, current := 0, 0
	var waiting []Node
	for _, n := range nodes {
		ph := PhaseAt(t, n, now)
		d.Phases[n.Name] = ph
		switch ph {
		case PhaseCurrent, PhaseFailed:
			allow(n)
			if ph == PhaseCurrent {
				current++
			}
		case PhaseInstalling:
			installing++
			allow(n)
			d.NextDeadline = Earliest(d.NextDeadline, d.InstallBy[n.Name])
		case PhaseStuck:
			d.Stuck[n.Name] = StuckReason(t, n)
			if PhaseOf(t, n) == PhaseWaiting {
				waiting = append(waiting, n)
			} else {
				allow(n)
			}
		case PhaseWaiting:
			waiting = append(waiting, n)
		}
		if ph == PhaseFailed {
			d.Failed = append(d.Failed, n.Name)
		}
	}
	slices.Sort(d.Failed)
	current += t.ServedElsewhere // the same bytes passed in other pools
	d.Halted = Halted(len(d.Failed), current, p)
	slices.SortFunc(waiting, func(a, b Node) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	slots := p.MaxUnavailable - installing
	for _, n := range waiting {
		if t.Generation == 1 || t.Rollback {
			allow(n)
			d.Phases[n.Name] = PhaseInstalling
			continue
		}
		if !d.Halted && !p.Paused && slots > 0 {
			slots--
			allow(n)
			d.NextDeadline = Earliest(d.NextDeadline, d.InstallBy[n.Name])
			d.Phases[n.Name] = PhaseInstalling
			continue
		}
		d.Allowed[n.Name] = held(t, n)
	}
	return d
}

// Earliest is the earlier of next (zero: none) and by (nil: none).
func Earliest(next time.Time, by *metav1.Time) time.Time {
	if by == nil || (!next.IsZero() && !by.Time.Before(next)) {
		return next
	}
	return by.Time
}

// Recheck is the sooner of after (0: none) and a second past deadline (zero: none): a node
// running out of rollout.nodeTimeout changes no object, so controllers look again then.
func Recheck(after time.Duration, deadline, now time.Time) time.Duration {
	if deadline.IsZero() {
		return after
	}
	until := max(deadline.Sub(now)+time.Second, time.Second)
	if after == 0 || until < after {
		return until
	}
	return after
}

// held is the generation a waiting node keeps: the one it serves in this epoch, else the
// allowance it already had, else target-1.
func held(t Target, n Node) int64 {
	if r := n.Report; r != nil && r.Epoch == t.Epoch && r.Generation > 0 && r.Generation < t.Generation &&
		(r.State == string(vocab.StateReady) || r.State == string(vocab.StateAvailable)) {
		return r.Generation
	}
	if n.Allowed > 0 && n.Allowed < t.Generation {
		return n.Allowed
	}
	return t.Generation - 1
}
