package retirement

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	evidence := func(name, uid string, retired time.Time, phase string) *brewletv1.NodeRetirementEvidence {
		e := &brewletv1.NodeRetirementEvidence{Spec: brewletv1.NodeRetirementEvidenceSpec{NodeName: name, NodeUID: uid, ProviderID: "cloud://i-1",
			InstanceID: "i-1", RetiredAt: metav1.NewTime(retired), EvidenceRef: "TICKET-1"}}
		e.Status.Phase = phase
		return e
	}
	owing := []brewletv1.NodeProfile{{ObjectMeta: metav1.ObjectMeta{Name: "general"},
		Status: brewletv1.NodeProfileStatus{Ledger: []brewletv1.LedgerEntry{{NodeName: "a", NodeUID: "uid-a", Owed: true}}}}}
	replacement := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-a-2"}, Spec: corev1.NodeSpec{ProviderID: "cloud://i-2"}}
	for _, tc := range []struct {
		name     string
		e        *brewletv1.NodeRetirementEvidence
		profiles []brewletv1.NodeProfile
		nodes    []corev1.Node
		phase    string
		msg      string
	}{
		{"matches a pending entry; a replacement node with the same name is not the host", evidence("a", "uid-a", now.Add(-time.Hour), ""), owing,
			[]corev1.Node{replacement}, brewletv1.EvidenceAccepted, "never able to run (not as done)"},
		{"a wrong UID matches no ledger entry", evidence("a", "uid-x", now.Add(-time.Hour), ""), owing, nil, brewletv1.EvidenceBlocked, "no NodeProfile ledger lists node a with uid uid-x"},
		{"retiredAt in the future", evidence("a", "uid-a", now.Add(time.Hour), ""), owing, nil, brewletv1.EvidenceBlocked, "in the future"},
		{"a live Node still has the UID", evidence("a", "uid-a", now.Add(-time.Hour), ""), owing,
			[]corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "renamed", UID: "uid-a"}}}, brewletv1.EvidenceBlocked, "still exists"},
		{"a live Node still has the provider ID", evidence("a", "uid-a", now.Add(-time.Hour), ""), owing,
			[]corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "uid-b"}, Spec: corev1.NodeSpec{ProviderID: "cloud://i-1"}}}, brewletv1.EvidenceBlocked, "host is alive"},
		{"accepted, then the entry is gone: resolved", evidence("a", "uid-a", now.Add(-time.Hour), brewletv1.EvidenceAccepted), nil, nil,
			brewletv1.EvidenceResolved, "any more"},
		{"never accepted and no entry: blocked, not resolved", evidence("a", "uid-a", now.Add(-time.Hour), ""), nil, nil, brewletv1.EvidenceBlocked, "no NodeProfile ledger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			phase, msg := Decide(tc.e, tc.profiles, tc.nodes, now)
			if phase != tc.phase || !strings.Contains(msg, tc.msg) {
				t.Fatalf("%s %q, want %s containing %q", phase, msg, tc.phase, tc.msg)
			}
		})
	}
}
