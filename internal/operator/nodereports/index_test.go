package nodereports

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

func TestProblemSummary(t *testing.T) {
	var problems []brewletv1.NodeAgentProblem
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7"} {
		problems = append(problems, brewletv1.NodeAgentProblem{NodeName: n, Reason: "AgentPodMissing"})
	}
	for _, c := range []struct {
		problems []brewletv1.NodeAgentProblem
		total    int32
		want     string
	}{
		{problems, 9, "n1 (AgentPodMissing), n2 (AgentPodMissing), n3 (AgentPodMissing), n4 (AgentPodMissing), n5 (AgentPodMissing), 4 more"},
		{problems[:2], 2, "n1 (AgentPodMissing), n2 (AgentPodMissing)"},
		{nil, 0, ""},
	} {
		if got := ProblemSummary(c.problems, c.total); got != c.want {
			t.Errorf("ProblemSummary(%d of %d) = %q, want %q", len(c.problems), c.total, got, c.want)
		}
	}
}

// A node's report maps to every runtime ID it names, installed or running, once each.
func TestRequests(t *testing.T) {
	nrt := &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: brewletv1.NodeRuntimeStatus{
		Runtimes: []brewletv1.NodeRuntimeEntry{{ID: "python"}, {ID: "java"}},
		Tasks:    []brewletv1.NodeTask{{ID: "python"}, {ID: "node"}},
	}}
	var got []string
	for _, r := range Requests(t.Context(), nrt) {
		got = append(got, r.Name)
	}
	if want := []string{"python", "java", "node"}; !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	if ids := RuntimeIDs(&corev1.Pod{}); ids != nil {
		t.Fatalf("a Pod indexed as %v", ids)
	}
}
