// Package retirement is the NodeRetirementEvidence controller: it checks an administrator's
// record that a host was destroyed against the NodeProfile ledgers and the live Nodes, and
// says Blocked (with why), Accepted (the NodeProfile controller then drops the entry), or
// Resolved (no ledger lists the node any more). Accepting evidence never claims the cleanup
// ran; it records that it never can.
package retirement

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

// Decide returns the evidence's phase and message.
func Decide(e *brewletv1.NodeRetirementEvidence, profiles []brewletv1.NodeProfile, nodes []corev1.Node, now time.Time) (phase, message string) {
	s := e.Spec
	if s.RetiredAt.After(now) {
		return brewletv1.EvidenceBlocked, fmt.Sprintf("retiredAt %s is in the future: a host cannot be retired before it is destroyed", s.RetiredAt.UTC().Format(time.RFC3339))
	}
	for _, n := range nodes {
		switch {
		case string(n.UID) == s.NodeUID:
			return brewletv1.EvidenceBlocked, fmt.Sprintf("Node %s with uid %s still exists: its own agent cleans it up; delete this evidence", n.Name, n.UID)
		case s.ProviderID != "" && n.Spec.ProviderID == s.ProviderID:
			return brewletv1.EvidenceBlocked, fmt.Sprintf("Node %s has providerID %s: that host is alive; delete this evidence", n.Name, s.ProviderID)
		}
	}
	var owed []string
	for _, p := range profiles {
		for _, l := range p.Status.Ledger {
			if l.NodeName == s.NodeName && string(l.NodeUID) == s.NodeUID {
				owed = append(owed, p.Name)
			}
		}
	}
	slices.Sort(owed)
	switch {
	case len(owed) > 0:
		return brewletv1.EvidenceAccepted, fmt.Sprintf("accepted for node %s (uid %s): the cleanup it owes to NodeProfile %s is resolved as never able to run (not as done)",
			s.NodeName, s.NodeUID, strings.Join(owed, ", "))
	case e.Status.Phase == brewletv1.EvidenceAccepted || e.Status.Phase == brewletv1.EvidenceResolved:
		return brewletv1.EvidenceResolved, fmt.Sprintf("no NodeProfile ledger lists node %s (uid %s) any more", s.NodeName, s.NodeUID)
	}
	return brewletv1.EvidenceBlocked, fmt.Sprintf("no NodeProfile ledger lists node %s with uid %s: check both against `kubectl get nodeprofiles -o yaml` (status.ledger), then delete this evidence and create a corrected one",
		s.NodeName, s.NodeUID)
}
