package nodeprofile

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/nodepool"
	"brewlet.sh/brewlet/internal/operator/eventnote"
	"brewlet.sh/brewlet/internal/vocab"
)

// LedgerDecision is the cleanup ledger one pass makes true, with its two conditions.
type LedgerDecision struct {
	Ledger              []brewletv1.LedgerEntry
	Cleanup, Retirement metav1.Condition
	// Release: the profile is being deleted and no node owes it anything.
	Release bool
}

// Ledger keeps the cleanup ledger (docs/operator.md, "The cleanup ledger"): an entry per node, by name and UID, from
// the moment the profile serves it, listing the runtime IDs it may hold and whether its
// containerd config was changed. A node the profile no longer serves (it left the pool, or
// the profile is going) owes cleanup until its own agent reports, for that very UID, that
// the runtimes are gone and the host is as before (status.cleanup) — or until another
// profile serves it and takes those obligations over. A node deleted or recreated (same
// name, new UID) keeps its entry pending: only accepted NodeRetirementEvidence (accepted,
// keyed "name/uid") resolves it. Nothing here ever assumes cleanup happened.
func Ledger(in Input, assigned []string, accepted map[string]bool) LedgerDecision {
	p := in.Profile
	nodes := map[string]*corev1.Node{}
	for i := range in.Nodes {
		nodes[in.Nodes[i].Name] = &in.Nodes[i]
	}
	offered := offeredIDs(p)
	validated := p.Spec.ContainerdRestart != string(vocab.ContainerdRestartNone)
	prev := map[string]brewletv1.LedgerEntry{}
	for _, e := range p.Status.Ledger {
		prev[ledgerKey(e.NodeName, e.NodeUID)] = e
	}
	var out []brewletv1.LedgerEntry
	served := map[string]bool{}
	for _, name := range assigned {
		n := nodes[name]
		if n == nil {
			continue
		}
		key := ledgerKey(n.Name, n.UID)
		served[key] = true
		e := brewletv1.LedgerEntry{NodeName: n.Name, NodeUID: n.UID, ContainerdConfig: validated || prev[key].ContainerdConfig}
		// IDs the profile stopped offering stay until the node reports them gone.
		installed, known := reported(in.Runtimes[n.Name], n.UID)
		e.RuntimeImages = union(offered, intersect(prev[key].RuntimeImages, installed, known))
		out = append(out, e)
	}
	var owing, gone []string
	for _, old := range p.Status.Ledger {
		key := ledgerKey(old.NodeName, old.NodeUID)
		if served[key] {
			continue
		}
		e := old
		if !e.Owed || e.Since == nil {
			t := in.Now
			e.Owed, e.Since = true, &t
		}
		n := nodes[e.NodeName]
		if n == nil || n.UID != e.NodeUID {
			if accepted[key] {
				continue // retirement evidence resolves it: the host no longer exists
			}
			e.Message = fmt.Sprintf("the node %s (uid %s) was deleted or recreated before its cleanup ran: if the host is destroyed, record it with a NodeRetirementEvidence", e.NodeName, e.NodeUID)
			gone = append(gone, e.NodeName+" (uid "+string(e.NodeUID)+")")
			out = append(out, e)
			continue
		}
		nrt := in.Runtimes[e.NodeName]
		var cl *brewletv1.NodeCleanup
		if nrt != nil && nrt.Status.NodeUID == e.NodeUID {
			cl = nrt.Status.Cleanup
		}
		owner, _ := nodepool.Select(n, in.Profiles)
		switch {
		case owner != nil && owner.Name != p.Name:
			// Another profile serves the node now: it records the host changes and the IDs
			// it offers; this one still owes the removal of the others.
			e.ContainerdConfig = false
			e.RuntimeImages = without(intersect(e.RuntimeImages, installedOf(cl), cl != nil), offeredIDs(owner))
			if len(e.RuntimeImages) == 0 && !e.ContainerdConfig {
				continue // nothing owed to this profile any more
			}
		case cl != nil && cl.Done:
			continue // the node's agent says nothing of Brewlet's is left
		default:
			// Only the agent's done counts: runtimes gone is not the host put back.
			e.RuntimeImages = intersect(e.RuntimeImages, installedOf(cl), cl != nil)
		}
		e.Message = owedSteps(e, cl)
		owing = append(owing, e.NodeName)
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b brewletv1.LedgerEntry) int {
		return strings.Compare(ledgerKey(a.NodeName, a.NodeUID), ledgerKey(b.NodeName, b.NodeUID))
	})
	d := LedgerDecision{Ledger: out, Release: p.DeletionTimestamp != nil && len(out) == 0}
	d.Cleanup = metav1.Condition{Type: string(vocab.ConditionCleanupComplete), ObservedGeneration: p.Generation, LastTransitionTime: in.Now}
	switch all := append(slices.Clone(owing), gone...); {
	case len(all) == 0:
		d.Cleanup.Status, d.Cleanup.Reason, d.Cleanup.Message = metav1.ConditionTrue, string(vocab.ReasonNothingOwed), "no node owes cleanup to this profile"
	default:
		slices.Sort(all)
		d.Cleanup.Status, d.Cleanup.Reason = metav1.ConditionFalse, string(vocab.ReasonCleanupPending)
		d.Cleanup.Message = fmt.Sprintf("%s owe cleanup (status.ledger says what each still owes)", names("node", all))
	}
	d.Retirement = metav1.Condition{Type: string(vocab.ConditionRetirementPending), ObservedGeneration: p.Generation, LastTransitionTime: in.Now}
	if len(gone) == 0 {
		d.Retirement.Status, d.Retirement.Reason, d.Retirement.Message = metav1.ConditionFalse, string(vocab.ReasonNoRetirementPending), "every node that owes cleanup still exists"
	} else {
		slices.Sort(gone)
		d.Retirement.Status, d.Retirement.Reason = metav1.ConditionTrue, string(vocab.ReasonRetirementPending)
		d.Retirement.Message = fmt.Sprintf("%s left before their cleanup ran; a replacement node does not clear it. If a host is destroyed, create a NodeRetirementEvidence for it (docs/uninstall.md)", names("node", gone))
	}
	return d
}

func ledgerKey(name string, uid types.UID) string { return name + "/" + string(uid) }

// owedSteps says what a node still owes, with its agent's own word when it has one.
func owedSteps(e brewletv1.LedgerEntry, cl *brewletv1.NodeCleanup) string {
	var steps []string
	if len(e.RuntimeImages) > 0 {
		steps = append(steps, "remove runtimes "+strings.Join(e.RuntimeImages, ", "))
	}
	if e.ContainerdConfig {
		steps = append(steps, "restore containerd's config and remove the shim")
	}
	if len(steps) == 0 {
		steps = append(steps, "finish its cleanup (Brewlet's state on the node)")
	}
	msg := "owes: " + strings.Join(steps, "; ")
	switch {
	case cl == nil:
		msg += " (its agent has not reported on this node yet)"
	case cl.Message != "":
		msg += " (agent: " + eventnote.Cut(cl.Message, maxAgentMessage) + ")"
	}
	return msg
}

// maxAgentMessage bounds what a node's own report adds to the profile's status: a node
// writes its NodeRuntime, not the profile.
const maxAgentMessage = 300

func offeredIDs(p *brewletv1.NodeProfile) []string {
	var out []string
	for _, o := range p.Spec.RuntimeImages {
		out = append(out, o.ID)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// reported are the IDs installed on the node by its agent's report for that UID; known is
// false when there is no such report (nothing can be dropped then).
func reported(nrt *brewletv1.NodeRuntime, uid types.UID) (ids []string, known bool) {
	if nrt == nil || nrt.Status.NodeUID != uid || nrt.Status.Cleanup == nil {
		return nil, false
	}
	return nrt.Status.Cleanup.InstalledRuntimes, true
}

func installedOf(cl *brewletv1.NodeCleanup) []string {
	if cl == nil {
		return nil
	}
	return cl.InstalledRuntimes
}

// intersect keeps the IDs of a that b lists; known false (no report) keeps all of a.
func intersect(a, b []string, known bool) []string {
	if !known {
		return slices.Clone(a)
	}
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func without(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func union(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}
