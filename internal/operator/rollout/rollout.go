// Package rollout decides, for one runtime ID across the nodes of one NodeProfile, which
// generation each node may install (NodeRuntime spec.runtimes[].allowedGeneration): new
// generations reach the pool in waves of rollout.maxUnavailable nodes, and a generation
// that more than rollout.maxFailures nodes fail reaches no further node. Pure: the
// NodeProfile controller calls it with what it read and writes the result.
package rollout

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// DefaultMaxFailures is rollout.maxFailures when the profile does not set it.
const DefaultMaxFailures = 1

// Policy is a profile's rollout policy resolved for a pool of a given size.
type Policy struct {
	// MaxUnavailable is how many nodes may be installing the target at once (at least 1).
	MaxUnavailable int
	// MaxFailures is how many nodes may fail the target before the rotation halts.
	MaxFailures int
}

// PolicyOf resolves rollout for a pool of poolSize nodes. maxUnavailable defaults to the
// whole pool; a percentage is of the pool, rounded up; anything below 1 becomes 1 (a wave
// of no node would never finish the rotation).
func PolicyOf(r *brewletv1.RolloutPolicy, poolSize int) Policy {
	p := Policy{MaxUnavailable: poolSize, MaxFailures: DefaultMaxFailures}
	if r != nil && r.MaxUnavailable != nil {
		if v, err := intstr.GetScaledValueFromIntOrPercent(r.MaxUnavailable, poolSize, true); err == nil {
			p.MaxUnavailable = v
		}
	}
	if r != nil && r.MaxFailures != nil {
		p.MaxFailures = int(*r.MaxFailures)
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
}

// Node is one assigned node as read: the allowed generation its NodeRuntime spec holds for
// the ID (0: none written) and the entry its agent reports for the ID (nil: none).
type Node struct {
	Name    string
	Allowed int64
	Report  *brewletv1.NodeRuntimeEntry
}

// Phase is where one node stands in the rotation to the target.
type Phase string

const (
	PhaseCurrent    Phase = "Current"    // serves the target (Ready or Available)
	PhaseInstalling Phase = "Installing" // allowed the target, not serving it yet
	PhaseFailed     Phase = "Failed"     // reported Failed for the target
	PhaseWaiting    Phase = "Waiting"    // not allowed the target yet (a later wave)
)

// Decision is the allowed generation per node and the rotation's state.
type Decision struct {
	// Allowed is the allowedGeneration to write per node name; 0 (only while the
	// RuntimeImage has no generation) means "the current generation", which is also what
	// the agent does without a directive.
	Allowed map[string]int64
	Phases  map[string]Phase
	// Halted: more than MaxFailures nodes failed the target; no further node is allowed it.
	Halted bool
	// Failed are the nodes that failed the target, sorted.
	Failed []string
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

// Halted reports whether failures exceed the budget.
func Halted(failed int, p Policy) bool { return failed > p.MaxFailures }

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
func Decide(t Target, nodes []Node, p Policy) Decision {
	d := Decision{Allowed: map[string]int64{}, Phases: map[string]Phase{}}
	if t.Generation < 1 {
		for _, n := range nodes {
			d.Allowed[n.Name] = 0
		}
		return d
	}
	installing := 0
	var waiting []Node
	for _, n := range nodes {
		ph := PhaseOf(t, n)
		d.Phases[n.Name] = ph
		switch ph {
		case PhaseCurrent, PhaseFailed:
			d.Allowed[n.Name] = t.Generation
		case PhaseInstalling:
			installing++
			d.Allowed[n.Name] = t.Generation
		case PhaseWaiting:
			waiting = append(waiting, n)
		}
		if ph == PhaseFailed {
			d.Failed = append(d.Failed, n.Name)
		}
	}
	slices.Sort(d.Failed)
	d.Halted = Halted(len(d.Failed), p)
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
		if t.Generation == 1 {
			d.Allowed[n.Name] = 1
			d.Phases[n.Name] = PhaseInstalling
			continue
		}
		if !d.Halted && slots > 0 {
			slots--
			d.Allowed[n.Name] = t.Generation
			d.Phases[n.Name] = PhaseInstalling
			continue
		}
		d.Allowed[n.Name] = held(t, n)
	}
	return d
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
