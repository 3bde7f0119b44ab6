package rollout

import (
	"maps"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

func rep(gen int64, state string) *brewletv1.NodeRuntimeEntry {
	return &brewletv1.NodeRuntimeEntry{ID: "py", Epoch: "e1", Generation: gen, State: state}
}

func TestPolicyOf(t *testing.T) {
	i := func(v int) *intstr.IntOrString { x := intstr.FromInt32(int32(v)); return &x }
	pct := func(s string) *intstr.IntOrString { x := intstr.FromString(s); return &x }
	f := func(v int32) *int32 { return &v }
	for _, tc := range []struct {
		name string
		r    *brewletv1.RolloutPolicy
		pool int
		want Policy
	}{
		{"defaults: whole pool, one failure", nil, 7, Policy{7, 1}},
		{"count", &brewletv1.RolloutPolicy{MaxUnavailable: i(2)}, 7, Policy{2, 1}},
		{"percentage rounds up", &brewletv1.RolloutPolicy{MaxUnavailable: pct("10%")}, 7, Policy{1, 1}},
		{"zero becomes one", &brewletv1.RolloutPolicy{MaxUnavailable: i(0)}, 7, Policy{1, 1}},
		{"empty pool", nil, 0, Policy{1, 1}},
		{"maxFailures 0", &brewletv1.RolloutPolicy{MaxFailures: f(0)}, 3, Policy{3, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PolicyOf(tc.r, tc.pool); got != tc.want {
				t.Fatalf("%+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	tgt := Target{Epoch: "e1", Generation: 3}
	one := Policy{MaxUnavailable: 1, MaxFailures: 1}
	for _, tc := range []struct {
		name   string
		target Target
		nodes  []Node
		pol    Policy
		want   map[string]int64
		halted bool
	}{
		{"no generation yet: no directive", Target{Epoch: "e1"}, []Node{{Name: "a"}}, one, map[string]int64{"a": 0}, false},
		{"first generation is not staged", Target{Epoch: "e1", Generation: 1}, []Node{{Name: "a"}, {Name: "b"}}, one,
			map[string]int64{"a": 1, "b": 1}, false},
		{"first wave: one node by name, the others keep what they serve", tgt,
			[]Node{{Name: "c", Report: rep(2, "Ready")}, {Name: "a", Report: rep(2, "Ready")}, {Name: "b", Report: rep(2, "Ready")}}, one,
			map[string]int64{"a": 3, "b": 2, "c": 2}, false},
		{"an allowed node not yet reporting the target holds the wave", tgt,
			[]Node{{Name: "a", Allowed: 3, Report: rep(2, "Ready")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}, {Name: "c", Allowed: 2, Report: rep(2, "Ready")}}, one,
			map[string]int64{"a": 3, "b": 2, "c": 2}, false},
		{"installing holds the wave", tgt,
			[]Node{{Name: "a", Allowed: 3, Report: rep(3, "Installing")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}}, one,
			map[string]int64{"a": 3, "b": 2}, false},
		{"current frees a slot: second wave", tgt,
			[]Node{{Name: "a", Allowed: 3, Report: rep(3, "Ready")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}, {Name: "c", Allowed: 2, Report: rep(2, "Ready")}}, one,
			map[string]int64{"a": 3, "b": 3, "c": 2}, false},
		{"one failure within the default budget: the rotation goes on", tgt,
			[]Node{{Name: "a", Allowed: 3, Report: rep(3, "Failed")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}, {Name: "c", Allowed: 2, Report: rep(2, "Ready")}}, one,
			map[string]int64{"a": 3, "b": 3, "c": 2}, false},
		{"maxFailures 0: the first failure halts", tgt,
			[]Node{{Name: "a", Allowed: 3, Report: rep(3, "Failed")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}, {Name: "c", Allowed: 2, Report: rep(2, "Ready")}},
			Policy{MaxUnavailable: 1, MaxFailures: 0},
			map[string]int64{"a": 3, "b": 2, "c": 2}, true},
		{"two failures over the default budget halt, even with free slots", tgt,
			[]Node{{Name: "a", Allowed: 3, Report: rep(3, "Failed")}, {Name: "b", Allowed: 3, Report: rep(3, "Failed")}, {Name: "c", Report: rep(2, "Ready")}},
			Policy{MaxUnavailable: 3, MaxFailures: 1},
			map[string]int64{"a": 3, "b": 3, "c": 2}, true},
		{"a new digest resumes: failures of the old target do not count", Target{Epoch: "e1", Generation: 4},
			[]Node{{Name: "a", Allowed: 3, Report: rep(3, "Failed")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}, {Name: "c", Allowed: 2, Report: rep(2, "Ready")}}, one,
			map[string]int64{"a": 4, "b": 2, "c": 2}, false},
		{"default: the whole pool at once", tgt,
			[]Node{{Name: "a", Report: rep(2, "Ready")}, {Name: "b", Report: rep(2, "Ready")}}, PolicyOf(nil, 2),
			map[string]int64{"a": 3, "b": 3}, false},
		{"a node without a report waits at target-1", tgt, []Node{{Name: "a", Allowed: 3, Report: rep(3, "Installing")}, {Name: "b"}}, one,
			map[string]int64{"a": 3, "b": 2}, false},
		{"a report of another epoch says nothing", tgt,
			[]Node{{Name: "a", Report: &brewletv1.NodeRuntimeEntry{ID: "py", Epoch: "old", Generation: 3, State: "Ready"}}, {Name: "b", Allowed: 3}}, one,
			map[string]int64{"a": 2, "b": 3}, false},
		{"the waiting node keeps an earlier allowance", tgt, []Node{{Name: "a", Allowed: 3}, {Name: "b", Allowed: 1}}, one,
			map[string]int64{"a": 3, "b": 1}, false},
		{"a node refusing the target while serving the older one fails it, and halts at maxFailures 0", tgt,
			[]Node{{Name: "a", Allowed: 3, Report: &brewletv1.NodeRuntimeEntry{ID: "py", Epoch: "e1", Generation: 2, State: "Ready",
				Reason: "PrivilegedRuntimeFile", FailedGeneration: 3}}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}},
			Policy{MaxUnavailable: 1, MaxFailures: 0},
			map[string]int64{"a": 3, "b": 2}, true},
		{"a refusal of an older target says nothing about this one", tgt,
			[]Node{{Name: "a", Allowed: 3, Report: &brewletv1.NodeRuntimeEntry{ID: "py", Epoch: "e1", Generation: 1, State: "Ready",
				FailedGeneration: 2}}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}},
			Policy{MaxUnavailable: 1, MaxFailures: 0},
			map[string]int64{"a": 3, "b": 2}, false},
		{"available counts as current", tgt, []Node{{Name: "a", Allowed: 3, Report: rep(3, "Available")}, {Name: "b", Report: rep(2, "Available")}}, one,
			map[string]int64{"a": 3, "b": 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.target, tc.nodes, tc.pol)
			if !maps.Equal(d.Allowed, tc.want) || d.Halted != tc.halted {
				t.Fatalf("allowed %v halted %v, want %v halted %v", d.Allowed, d.Halted, tc.want, tc.halted)
			}
			// Deciding again over what was just written changes nothing while no node reports.
			var again []Node
			for _, n := range tc.nodes {
				n.Allowed = d.Allowed[n.Name]
				again = append(again, n)
			}
			if d2 := Decide(tc.target, again, tc.pol); !maps.Equal(d2.Allowed, d.Allowed) && tc.target.Generation > 1 {
				t.Fatalf("not idempotent: %v then %v", d.Allowed, d2.Allowed)
			}
		})
	}
}

// A second generation assigned before any node reported the first: the nodes were allowed
// 1 explicitly, so every node but the first wave stays held at 1.
func TestSecondGenerationBeforeFirstReports(t *testing.T) {
	p := Policy{MaxUnavailable: 1, MaxFailures: 1}
	first := Decide(Target{Epoch: "e1", Generation: 1}, []Node{{Name: "a"}, {Name: "b"}, {Name: "c"}}, p)
	var nodes []Node
	for _, n := range []string{"a", "b", "c"} {
		if first.Allowed[n] != 1 {
			t.Fatalf("generation 1: node %s allowed %d, want 1", n, first.Allowed[n])
		}
		nodes = append(nodes, Node{Name: n, Allowed: first.Allowed[n]})
	}
	second := Decide(Target{Epoch: "e1", Generation: 2}, nodes, p)
	if want := map[string]int64{"a": 2, "b": 1, "c": 1}; !maps.Equal(second.Allowed, want) {
		t.Fatalf("generation 2: allowed %v, want %v", second.Allowed, want)
	}
}
