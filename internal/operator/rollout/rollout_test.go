package rollout

import (
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// now is the decisions' clock; deadlines in the tables are relative to it.
var now = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)

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
		{"defaults: whole pool, one failure", nil, 7, Policy{7, 1, DefaultNodeTimeout, false}},
		{"count", &brewletv1.RolloutPolicy{MaxUnavailable: i(2)}, 7, Policy{2, 1, DefaultNodeTimeout, false}},
		{"percentage rounds up", &brewletv1.RolloutPolicy{MaxUnavailable: pct("10%")}, 7, Policy{1, 1, DefaultNodeTimeout, false}},
		{"zero becomes one", &brewletv1.RolloutPolicy{MaxUnavailable: i(0)}, 7, Policy{1, 1, DefaultNodeTimeout, false}},
		{"empty pool", nil, 0, Policy{1, 1, DefaultNodeTimeout, false}},
		{"maxFailures 0", &brewletv1.RolloutPolicy{MaxFailures: f(0)}, 3, Policy{3, 0, DefaultNodeTimeout, false}},
		{"nodeTimeout", &brewletv1.RolloutPolicy{NodeTimeout: &metav1.Duration{Duration: time.Minute}}, 3, Policy{3, 1, time.Minute, false}},
		{"nodeTimeout 0 is the default", &brewletv1.RolloutPolicy{NodeTimeout: &metav1.Duration{}}, 3, Policy{3, 1, DefaultNodeTimeout, false}},
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
		// A content verdict is the same on every node: when reports disagree, the larger
		// side is believed. A few nodes claiming failures stop no patch the rest serves...
		{"failures over the budget beside more nodes serving the target do not halt", tgt,
			[]Node{{Name: "a", Allowed: 3, Report: rep(3, "Failed")}, {Name: "b", Allowed: 3, Report: rep(3, "Failed")},
				{Name: "c", Allowed: 3, Report: rep(3, "Ready")}, {Name: "d", Allowed: 3, Report: rep(3, "Ready")},
				{Name: "e", Allowed: 3, Report: rep(3, "Ready")}, {Name: "f", Report: rep(2, "Ready")}},
			Policy{MaxUnavailable: 1, MaxFailures: 1},
			map[string]int64{"a": 3, "b": 3, "c": 3, "d": 3, "e": 3, "f": 3}, false},
		{"failures over the budget while more nodes of other pools serve the target do not halt", Target{Epoch: "e1", Generation: 3, ServedElsewhere: 3},
			[]Node{{Name: "a", Allowed: 3, Report: rep(3, "Failed")}, {Name: "b", Allowed: 3, Report: rep(3, "Failed")}, {Name: "c", Report: rep(2, "Ready")}},
			Policy{MaxUnavailable: 1, MaxFailures: 1},
			map[string]int64{"a": 3, "b": 3, "c": 3}, false},
		{"maxFailures 0: one failure beside two serving nodes does not halt", tgt,
			[]Node{{Name: "a", Allowed: 3, Report: rep(3, "Failed")}, {Name: "b", Allowed: 3, Report: rep(3, "Ready")},
				{Name: "c", Allowed: 3, Report: rep(3, "Ready")}, {Name: "d", Report: rep(2, "Ready")}},
			Policy{MaxUnavailable: 1, MaxFailures: 0},
			map[string]int64{"a": 3, "b": 3, "c": 3, "d": 3}, false},
		// ...and one node claiming to serve a digest the others refuse keeps it from none.
		{"failures outnumbering the nodes serving the target halt", tgt,
			[]Node{{Name: "a", Allowed: 3, Report: rep(3, "Failed")}, {Name: "b", Allowed: 3, Report: rep(3, "Failed")},
				{Name: "c", Allowed: 3, Report: rep(3, "Ready")}, {Name: "d", Report: rep(2, "Ready")}},
			Policy{MaxUnavailable: 1, MaxFailures: 1},
			map[string]int64{"a": 3, "b": 3, "c": 3, "d": 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.target, tc.nodes, tc.pol, now)
			if !maps.Equal(d.Allowed, tc.want) || d.Halted != tc.halted {
				t.Fatalf("allowed %v halted %v, want %v halted %v", d.Allowed, d.Halted, tc.want, tc.halted)
			}
			// Deciding again over what was just written changes nothing while no node reports.
			var again []Node
			for _, n := range tc.nodes {
				n.Allowed = d.Allowed[n.Name]
				again = append(again, n)
			}
			if d2 := Decide(tc.target, again, tc.pol, now); !maps.Equal(d2.Allowed, d.Allowed) && tc.target.Generation > 1 {
				t.Fatalf("not idempotent: %v then %v", d.Allowed, d2.Allowed)
			}
		})
	}
}

// A second generation assigned before any node reported the first: the nodes were allowed
// 1 explicitly, so every node but the first wave stays held at 1.
func TestSecondGenerationBeforeFirstReports(t *testing.T) {
	p := Policy{MaxUnavailable: 1, MaxFailures: 1}
	first := Decide(Target{Epoch: "e1", Generation: 1}, []Node{{Name: "a"}, {Name: "b"}, {Name: "c"}}, p, now)
	var nodes []Node
	for _, n := range []string{"a", "b", "c"} {
		if first.Allowed[n] != 1 {
			t.Fatalf("generation 1: node %s allowed %d, want 1", n, first.Allowed[n])
		}
		nodes = append(nodes, Node{Name: n, Allowed: first.Allowed[n]})
	}
	second := Decide(Target{Epoch: "e1", Generation: 2}, nodes, p, now)
	if want := map[string]int64{"a": 2, "b": 1, "c": 1}; !maps.Equal(second.Allowed, want) {
		t.Fatalf("generation 2: allowed %v, want %v", second.Allowed, want)
	}
}

// Stuck nodes: past their installBy, or silent, they are excluded and free their slot;
// they keep what they were allowed, and a silent node is not let through.
func TestDecideStuck(t *testing.T) {
	tgt := Target{Epoch: "e1", Generation: 3}
	one := Policy{MaxUnavailable: 1, MaxFailures: 0, NodeTimeout: time.Minute}
	past := &metav1.Time{Time: now.Add(-time.Second)}
	future := &metav1.Time{Time: now.Add(time.Second)}
	for _, tc := range []struct {
		name  string
		nodes []Node
		want  map[string]int64
		stuck map[string]vocab.Reason
	}{
		{"installing within its deadline holds the wave",
			[]Node{{Name: "a", Allowed: 3, InstallBy: future, Report: rep(3, "Installing")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}},
			map[string]int64{"a": 3, "b": 2}, map[string]vocab.Reason{}},
		{"past its deadline: excluded, keeps its allowance, the next wave goes",
			[]Node{{Name: "a", Allowed: 3, InstallBy: past, Report: rep(3, "Installing")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}},
			map[string]int64{"a": 3, "b": 3}, map[string]vocab.Reason{"a": vocab.ReasonNodeTimedOut}},
		{"allowed, still serving the old generation past its deadline",
			[]Node{{Name: "a", Allowed: 3, InstallBy: past, Report: rep(2, "Ready")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}},
			map[string]int64{"a": 3, "b": 3}, map[string]vocab.Reason{"a": vocab.ReasonNodeTimedOut}},
		{"a silent installing node frees its slot",
			[]Node{{Name: "a", Allowed: 3, InstallBy: future, Silent: true, Report: rep(3, "Installing")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}},
			map[string]int64{"a": 3, "b": 3}, map[string]vocab.Reason{"a": vocab.ReasonAgentNotReporting}},
		{"a silent waiting node waits for its wave like any other",
			[]Node{{Name: "a", Allowed: 2, Silent: true, Report: rep(2, "Ready")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}},
			map[string]int64{"a": 3, "b": 2}, map[string]vocab.Reason{"a": vocab.ReasonAgentNotReporting}},
		{"let through, a silent node frees its slot on the next pass",
			[]Node{{Name: "a", Allowed: 3, InstallBy: future, Silent: true, Report: rep(2, "Ready")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}},
			map[string]int64{"a": 3, "b": 3}, map[string]vocab.Reason{"a": vocab.ReasonAgentNotReporting}},
		{"a silent current node is current",
			[]Node{{Name: "a", Allowed: 3, Silent: true, Report: rep(3, "Ready")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}},
			map[string]int64{"a": 3, "b": 3}, map[string]vocab.Reason{}},
		{"a stuck node is no failure: maxFailures 0 does not halt",
			[]Node{{Name: "a", Allowed: 3, InstallBy: past, Report: rep(3, "Installing")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")}, {Name: "c", Allowed: 2, Report: rep(2, "Ready")}},
			map[string]int64{"a": 3, "b": 3, "c": 2}, map[string]vocab.Reason{"a": vocab.ReasonNodeTimedOut}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tgt, tc.nodes, one, now)
			if !maps.Equal(d.Allowed, tc.want) || !maps.Equal(d.Stuck, tc.stuck) || d.Halted {
				t.Fatalf("allowed %v stuck %v halted %v, want %v stuck %v", d.Allowed, d.Stuck, d.Halted, tc.want, tc.stuck)
			}
		})
	}
}

// installBy is set when a node is let through, kept while its allowance stays, and
// restarted only when the allowance changes: an operator restart does not extend it.
func TestDecideInstallBy(t *testing.T) {
	tgt := Target{Epoch: "e1", Generation: 3}
	p := Policy{MaxUnavailable: 2, MaxFailures: 1, NodeTimeout: time.Minute}
	earlier := &metav1.Time{Time: now.Add(30 * time.Second)} // set by an earlier pass
	d := Decide(tgt, []Node{
		{Name: "a", Allowed: 2, Report: rep(2, "Ready")},
		{Name: "b", Allowed: 3, InstallBy: earlier, Report: rep(3, "Installing")},
		{Name: "c", Allowed: 2, Report: rep(2, "Ready")},
	}, p, now)
	if got := d.InstallBy["a"]; got == nil || !got.Time.Equal(now.Add(time.Minute)) {
		t.Errorf("a let through: installBy %v, want now+1m", got)
	}
	if got := d.InstallBy["b"]; got != earlier {
		t.Errorf("b already allowed: installBy %v, want the one it had (%v)", got, earlier)
	}
	if got := d.InstallBy["c"]; got != nil {
		t.Errorf("c waiting: installBy %v, want none", got)
	}
	first := Decide(Target{Epoch: "e1", Generation: 1}, []Node{{Name: "a"}}, p, now)
	if first.InstallBy["a"] == nil {
		t.Errorf("first generation: no installBy")
	}
}

func TestRecheck(t *testing.T) {
	for _, tc := range []struct {
		name     string
		after    time.Duration
		deadline time.Time
		want     time.Duration
	}{
		{"nothing to wait for", 0, time.Time{}, 0},
		{"only the period", time.Minute, time.Time{}, time.Minute},
		{"a deadline before the period: a second past it", time.Minute, now.Add(10 * time.Second), 11 * time.Second},
		{"a deadline after the period: the period", time.Minute, now.Add(time.Hour), time.Minute},
		{"only a deadline", 0, now.Add(time.Hour), time.Hour + time.Second},
		{"a deadline already past: one second", time.Minute, now.Add(-time.Hour), time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Recheck(tc.after, tc.deadline, now); got != tc.want {
				t.Fatalf("Recheck = %s, want %s", got, tc.want)
			}
		})
	}
}

// The earliest deadline of a node still installing is reported; stuck and current nodes
// have none to wait for.
func TestDecideNextDeadline(t *testing.T) {
	soon, later := &metav1.Time{Time: now.Add(time.Minute)}, &metav1.Time{Time: now.Add(time.Hour)}
	d := Decide(Target{Epoch: "e1", Generation: 3}, []Node{
		{Name: "a", Allowed: 3, InstallBy: later, Report: rep(3, "Installing")},
		{Name: "b", Allowed: 3, InstallBy: soon, Report: rep(3, "Installing")},
		{Name: "c", Allowed: 3, InstallBy: &metav1.Time{Time: now.Add(-time.Minute)}, Report: rep(3, "Installing")},
		{Name: "d", Allowed: 3, InstallBy: &metav1.Time{Time: now.Add(-2 * time.Minute)}, Report: rep(3, "Ready")},
	}, Policy{MaxUnavailable: 4, MaxFailures: 1, NodeTimeout: time.Minute}, now)
	if !d.NextDeadline.Equal(soon.Time) {
		t.Fatalf("next deadline %v, want %v", d.NextDeadline, soon.Time)
	}
}

// A paused rotation lets no waiting node through; allowed nodes keep their allowance;
// the first generation is not staged, so not paused.
func TestDecidePaused(t *testing.T) {
	p := Policy{MaxUnavailable: 3, MaxFailures: 1, NodeTimeout: time.Minute, Paused: true}
	d := Decide(Target{Epoch: "e1", Generation: 3}, []Node{
		{Name: "a", Allowed: 3, Report: rep(3, "Installing")}, {Name: "b", Allowed: 2, Report: rep(2, "Ready")},
	}, p, now)
	if want := map[string]int64{"a": 3, "b": 2}; !maps.Equal(d.Allowed, want) || d.Halted {
		t.Fatalf("paused: allowed %v halted %v, want %v", d.Allowed, d.Halted, want)
	}
	if first := Decide(Target{Epoch: "e1", Generation: 1}, []Node{{Name: "a"}}, p, now); first.Allowed["a"] != 1 {
		t.Fatalf("paused first generation: allowed %v", first.Allowed)
	}
}

// A report that cannot be true makes its node stuck (ReportInvalid): it takes no wave slot,
// counts neither as serving nor as failing.
func TestUnbelievableReports(t *testing.T) {
	target := Target{Epoch: "e1", Generation: 2, Digest: "sha256:good"}
	observed := metav1.NewTime(now)
	served := rep(2, string(vocab.StateReady))
	served.Digest = "sha256:good"
	forged := rep(2, string(vocab.StateReady))
	forged.Digest = "sha256:other"
	future := rep(7, string(vocab.StateReady))
	failedFuture := rep(1, string(vocab.StateReady))
	failedFuture.FailedGeneration = 3
	negative := rep(-1, string(vocab.StateReady))
	otherEpoch := rep(9, string(vocab.StateReady))
	otherEpoch.Epoch = "e0"
	installingOther := rep(2, string(vocab.StateInstalling))
	installingOther.Digest = "sha256:other"
	for _, c := range []struct {
		name       string
		report     *brewletv1.NodeRuntimeEntry
		observedAt *metav1.Time
		nodeUID    string
		want       Phase
		reason     vocab.Reason
	}{
		{"serving the target's digest", served, &observed, "uid", PhaseCurrent, ""},
		{"serving it under another digest", forged, &observed, "uid", PhaseStuck, vocab.ReasonReportInvalid},
		{"a generation never assigned", future, &observed, "uid", PhaseStuck, vocab.ReasonReportInvalid},
		{"failing a generation never assigned", failedFuture, &observed, "uid", PhaseStuck, vocab.ReasonReportInvalid},
		{"a negative generation", negative, &observed, "uid", PhaseStuck, vocab.ReasonReportInvalid},
		{"no observedAt", served, nil, "uid", PhaseStuck, vocab.ReasonReportInvalid},
		{"an oversized node UID", served, &observed, string(make([]byte, 200)), PhaseStuck, vocab.ReasonReportInvalid},
		{"another epoch says nothing about the target", otherEpoch, &observed, "uid", PhaseInstalling, ""},
		{"installing names no digest to check", installingOther, &observed, "uid", PhaseInstalling, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			nrt := &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
			nrt.Spec.Runtimes = []brewletv1.RuntimeDirective{{ID: "py", AllowedGeneration: 2}}
			nrt.Status.Runtimes = []brewletv1.NodeRuntimeEntry{*c.report}
			nrt.Status.ObservedAt, nrt.Status.NodeUID = c.observedAt, types.UID(c.nodeUID)
			n := NodeOf(nrt, c.report, nil)
			if got := PhaseAt(target, n, now); got != c.want {
				t.Fatalf("phase %s, want %s (%q)", got, c.want, Unbelievable(target, n))
			}
			if c.reason != "" && StuckReason(target, n) != c.reason {
				t.Fatalf("stuck as %s, want %s", StuckReason(target, n), c.reason)
			}
			if (Unbelievable(target, n) != "") != (c.reason != "") {
				t.Fatalf("Unbelievable %q", Unbelievable(target, n))
			}
		})
	}
	// Deciding the waves: an unbelievable node takes no slot; the next waiting node gets it.
	liar := Node{Name: "a", Allowed: 2, Report: forged}
	waiting := Node{Name: "b", Allowed: 1, Report: rep(1, string(vocab.StateReady))}
	d := Decide(target, []Node{liar, waiting}, Policy{MaxUnavailable: 1}, now)
	if d.Stuck["a"] != vocab.ReasonReportInvalid || d.Allowed["b"] != 2 {
		t.Fatalf("decision %+v", d)
	}
}

// A rollback is allowed to every node at once: no wave, no halt, no pause holds it.
func TestDecideRollback(t *testing.T) {
	p := Policy{MaxUnavailable: 1, MaxFailures: 0, NodeTimeout: time.Minute, Paused: true}
	nodes := []Node{
		{Name: "a", Allowed: 3, Report: rep(3, "Ready")},
		{Name: "b", Allowed: 3, Report: &brewletv1.NodeRuntimeEntry{ID: "py", Epoch: "e1", Generation: 2, State: "Ready", FailedGeneration: 3}},
		{Name: "c", Allowed: 2, Report: rep(2, "Ready")},
	}
	if d := Decide(Target{Epoch: "e1", Generation: 4, Rollback: true}, nodes, p, now); !maps.Equal(d.Allowed, map[string]int64{"a": 4, "b": 4, "c": 4}) {
		t.Fatalf("rollback allowed %v", d.Allowed)
	}
	if d := Decide(Target{Epoch: "e1", Generation: 4}, nodes, p, now); d.Allowed["c"] == 4 {
		t.Fatalf("an ordinary paused rotation let a waiting node through: %v", d.Allowed)
	}
}
