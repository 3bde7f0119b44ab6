package runtimeimage

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

func at(gen int64, state vocab.RuntimeState, reason string) brewletv1.NodeRuntimeEntry {
	return brewletv1.NodeRuntimeEntry{ID: "python-3.12", Epoch: uid, Generation: gen, State: string(state), Reason: reason}
}

func TestRotation(t *testing.T) {
	for _, tc := range []struct {
		name      string
		r         *brewletv1.RuntimeImage
		reports   []brewletv1.NodeRuntime
		budget    int
		counts    brewletv1.RotationNodeCounts
		progress  string // status/reason
		complete  string
		excluded  string
		msg       string
		completed bool
	}{
		{name: "no node reports", r: ri(finalized, status(uid, 1, dA)),
			progress: "False/NoNodes", complete: "False/NoNodes"},
		{name: "every node current: complete", r: ri(finalized, status(uid, 1, dA)),
			reports:  []brewletv1.NodeRuntime{report("a", at(1, vocab.StateReady, "")), report("b", at(1, vocab.StateAvailable, ""))},
			counts:   brewletv1.RotationNodeCounts{Current: 2},
			progress: "False/AllNodesCurrent", complete: "True/AllNodesCurrent", completed: true},
		{name: "a rotation under way: waiting, installing and current", r: ri(finalized, image(repo+dB), status(uid, 1, dA)),
			reports: []brewletv1.NodeRuntime{report("a", at(2, vocab.StateReady, "")), report("b", at(2, vocab.StateInstalling, "")),
				report("c", at(1, vocab.StateReady, "")), report("gone", brewletv1.NodeRuntimeEntry{ID: "python-3.12", Epoch: uid, State: "Revoked"}),
				report("other-epoch", brewletv1.NodeRuntimeEntry{ID: "python-3.12", Epoch: "old", Generation: 2, State: "Ready"})},
			counts:   brewletv1.RotationNodeCounts{Current: 1, Installing: 1},
			progress: "True/Rotating", complete: "False/Rotating", msg: "1 of 3 node(s) serve generation 2"},
		{name: "one failure within the default budget keeps going", r: ri(finalized, image(repo+dB), status(uid, 2, dB)), budget: 1,
			reports:  []brewletv1.NodeRuntime{report("a", at(2, vocab.StateFailed, "PrivilegedRuntimeFile")), report("b", at(1, vocab.StateReady, ""))},
			counts:   brewletv1.RotationNodeCounts{Failed: 1, Excluded: 1},
			progress: "True/Rotating", complete: "False/Rotating", excluded: "a:PrivilegedRuntimeFile:2"},
		{name: "the others current and the failures within the budget: complete without the excluded", r: ri(finalized, image(repo+dB), status(uid, 2, dB)), budget: 1,
			reports:  []brewletv1.NodeRuntime{report("a", at(2, vocab.StateFailed, "PrivilegedRuntimeFile")), report("b", at(2, vocab.StateReady, ""))},
			counts:   brewletv1.RotationNodeCounts{Current: 1, Failed: 1, Excluded: 1},
			progress: "False/CompleteWithExclusions", complete: "True/CompleteWithExclusions", excluded: "a:PrivilegedRuntimeFile:2",
			msg: "a: PrivilegedRuntimeFile", completed: true},
		{name: "every node failed within the budget: not complete", r: ri(finalized, image(repo+dB), status(uid, 2, dB)), budget: 1,
			reports:  []brewletv1.NodeRuntime{report("a", at(2, vocab.StateFailed, "PrivilegedRuntimeFile"))},
			counts:   brewletv1.RotationNodeCounts{Failed: 1, Excluded: 1},
			progress: "True/Rotating", complete: "False/Rotating", excluded: "a:PrivilegedRuntimeFile:2"},
		{name: "failures over the budget halt, failing nodes and reasons listed", r: ri(finalized, image(repo+dB), status(uid, 2, dB)), budget: 0,
			reports:  []brewletv1.NodeRuntime{report("b", at(2, vocab.StateFailed, "")), report("a", at(2, vocab.StateFailed, "PrivilegedRuntimeFile")), report("c", at(1, vocab.StateReady, ""))},
			counts:   brewletv1.RotationNodeCounts{Failed: 2, Excluded: 2},
			progress: "False/RotationHalted", complete: "False/RotationHalted", excluded: "a:PrivilegedRuntimeFile:2,b:Failed:2",
			msg: "a: PrivilegedRuntimeFile; b: Failed"},
		{name: "failures of an older target do not count", r: ri(finalized, image(repo+dA), status(uid, 2, dB)), budget: 0,
			reports:  []brewletv1.NodeRuntime{report("a", at(2, vocab.StateFailed, "PrivilegedRuntimeFile")), report("b", at(1, vocab.StateReady, ""))},
			progress: "True/Rotating", complete: "False/Rotating"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.r, tc.reports, tc.budget, allFresh, noneSilent, "", Verdicts{}, t1)
			rot := d.Status.Rotation
			if rot == nil || rot.Target.Generation != d.Status.Generation || rot.Target.Digest != d.Status.Digest || !rot.Target.AssignedAt.Equal(&t1) {
				t.Fatalf("rotation target %+v, want generation %d %s assigned at %v", rot, d.Status.Generation, d.Status.Digest, t1)
			}
			if rot.Nodes != tc.counts {
				t.Fatalf("counts %+v, want %+v", rot.Nodes, tc.counts)
			}
			var ex []string
			for _, x := range rot.ExcludedNodes {
				ex = append(ex, fmt.Sprintf("%s:%s:%d", x.Name, x.Reason, x.Generation))
			}
			if strings.Join(ex, ",") != tc.excluded {
				t.Fatalf("excluded %v, want %s", ex, tc.excluded)
			}
			p := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionRotationProgressing))
			c := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionRotationComplete))
			if got := string(p.Status) + "/" + p.Reason; got != tc.progress {
				t.Fatalf("RotationProgressing %s (%s), want %s", got, p.Message, tc.progress)
			}
			if got := string(c.Status) + "/" + c.Reason; got != tc.complete {
				t.Fatalf("RotationComplete %s (%s), want %s", got, c.Message, tc.complete)
			}
			if !strings.Contains(p.Message, tc.msg) {
				t.Fatalf("RotationProgressing message %q lacks %q", p.Message, tc.msg)
			}
			if (rot.RotationCompletedAt != nil) != tc.completed {
				t.Fatalf("rotationCompletedAt %v", rot.RotationCompletedAt)
			}
			// Idempotent: a second pass over the stored status changes nothing.
			again := tc.r.DeepCopy()
			again.Status = d.Status
			if d2 := Decide(again, tc.reports, tc.budget, allFresh, noneSilent, "", Verdicts{}, metav1.NewTime(t1.Add(3600e9))); !equality.Semantic.DeepEqual(d2.Status, d.Status) {
				t.Fatalf("second pass changed the status:\n%+v\n%+v", d.Status.Rotation, d2.Status.Rotation)
			}
		})
	}
}

// rotationCompletedAt is set once per target: a node joining later (installing) leaves
// the completed rotation complete; the next digest starts a new target.
func TestRotationCompletedOncePerTarget(t *testing.T) {
	r := ri(finalized, status(uid, 1, dA))
	d := Decide(r, []brewletv1.NodeRuntime{report("a", at(1, vocab.StateReady, ""))}, 1, allFresh, noneSilent, "", Verdicts{}, t0)
	r.Status = d.Status
	d = Decide(r, []brewletv1.NodeRuntime{report("a", at(1, vocab.StateReady, "")), report("new", at(1, vocab.StateInstalling, ""))}, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	if at := d.Status.Rotation.RotationCompletedAt; at == nil || !at.Equal(&t0) {
		t.Fatalf("rotationCompletedAt %v, want %v kept", at, t0)
	}
	if c := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionRotationComplete)); c.Status != metav1.ConditionTrue {
		t.Fatalf("RotationComplete %+v", c)
	}
	r.Status = d.Status
	r.Spec.Source.Image = repo + dB
	d = Decide(r, []brewletv1.NodeRuntime{report("a", at(1, vocab.StateReady, ""))}, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	if d.Status.Rotation.Target.Generation != 2 || d.Status.Rotation.RotationCompletedAt != nil || !d.Status.Rotation.Target.AssignedAt.Equal(&t1) {
		t.Fatalf("a new digest must start a new target: %+v", d.Status.Rotation)
	}
}

func TestEvents(t *testing.T) {
	r := ri(finalized, image(repo+dB), status(uid, 1, dA))
	reasons := func(d Decision) string {
		var out []string
		for _, e := range d.Events {
			out = append(out, e.Type+"/"+string(e.Reason))
		}
		return strings.Join(out, ",")
	}
	d := Decide(r, []brewletv1.NodeRuntime{report("a", at(2, vocab.StateInstalling, ""))}, 0, allFresh, noneSilent, "", Verdicts{}, t0)
	if got := reasons(d); got != "Normal/Approved,Normal/Rotating" {
		t.Fatalf("first pass events %s", got)
	}
	r.Status = d.Status
	if got := reasons(Decide(r, []brewletv1.NodeRuntime{report("a", at(2, vocab.StateInstalling, "")), report("b", at(1, vocab.StateReady, ""))}, 0, allFresh, noneSilent, "", Verdicts{}, t1)); got != "" {
		t.Fatalf("a count change is not an event: %s", got)
	}
	d = Decide(r, []brewletv1.NodeRuntime{report("a", at(2, vocab.StateFailed, "PrivilegedRuntimeFile"))}, 0, allFresh, noneSilent, "", Verdicts{}, t1)
	if got := reasons(d); got != "Warning/RotationHalted" || !strings.Contains(d.Events[0].Message, "a: PrivilegedRuntimeFile") {
		t.Fatalf("halt events %s %+v", got, d.Events)
	}
	r.Status = d.Status
	r.Spec.Source.Image = repo + dA
	d = Decide(r, []brewletv1.NodeRuntime{report("a", at(3, vocab.StateReady, ""))}, 0, allFresh, noneSilent, "", Verdicts{}, t1)
	if got := reasons(d); got != "Normal/AllNodesCurrent,Normal/AllNodesCurrent" {
		t.Fatalf("completion events %s", got)
	}
}

// A new target drops the previous target's restart records: none of them holds a slot.
func TestNewTargetDropsRestartRecords(t *testing.T) {
	r := ri(finalized, image(repo+dB), status(uid, 1, dA))
	r.Status.Rotation = &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: 1, Digest: dA},
		Restarts: []brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "ns", Name: "web", Outcome: "InProgress"}}}
	d := Decide(r, nil, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	if d.Status.Rotation == nil || d.Status.Rotation.Target.Generation != 2 || len(d.Status.Rotation.Restarts) != 0 {
		t.Fatalf("rotation %+v", d.Status.Rotation)
	}
}

// An unfinished rotation names the nodes its profiles list without a running agent; a
// finished one is left as it is.
func TestNameMissingAgents(t *testing.T) {
	st := &brewletv1.RuntimeImageStatus{Conditions: []metav1.Condition{
		{Type: string(vocab.ConditionRotationProgressing), Reason: string(vocab.ReasonNoNodes), Message: "no node reports python yet; generation 1 is the target"},
		{Type: string(vocab.ConditionRotationComplete), Reason: string(vocab.ReasonNoNodes), Message: "no node reports python yet; generation 1 is the target"},
		{Type: string(vocab.ConditionApproved), Reason: string(vocab.ReasonApproved), Message: "approved"},
	}}
	nameMissingAgents(st, []string{"n1 (AgentContainerFailing) (NodeProfile general)"})
	for _, c := range st.Conditions[:2] {
		if !strings.HasSuffix(c.Message, "; nodes without a running agent: n1 (AgentContainerFailing) (NodeProfile general)") {
			t.Errorf("%s: %q", c.Type, c.Message)
		}
	}
	if st.Conditions[2].Message != "approved" {
		t.Errorf("Approved changed: %q", st.Conditions[2].Message)
	}
	done := &brewletv1.RuntimeImageStatus{Conditions: []metav1.Condition{{Type: string(vocab.ConditionRotationComplete), Reason: string(vocab.ReasonAllNodesCurrent), Message: "done"}}}
	nameMissingAgents(done, []string{"n1 (AgentPodMissing) (NodeProfile general)"})
	if done.Conditions[0].Message != "done" {
		t.Errorf("a finished rotation was changed: %q", done.Conditions[0].Message)
	}
}

// allowed gives a report the directive its NodeProfile wrote: allowed generation and the
// deadline of its wave.
func allowed(n brewletv1.NodeRuntime, gen int64, by metav1.Time) brewletv1.NodeRuntime {
	n.Spec.Runtimes = []brewletv1.RuntimeDirective{{ID: "python-3.12", Install: "Eager", AllowedGeneration: gen, InstallBy: &by}}
	return n
}

// Stuck nodes (past installBy, or silent) are excluded without counting a failure: the
// rotation completes without them, and they rejoin when they report the target.
func TestRotationStuck(t *testing.T) {
	before, after := metav1.NewTime(t1.Add(-time.Minute)), metav1.NewTime(t1.Add(time.Minute))
	silent := func(names ...string) func(string) bool {
		return func(n string) bool { return slices.Contains(names, n) }
	}
	for _, tc := range []struct {
		name     string
		reports  []brewletv1.NodeRuntime
		silent   func(string) bool
		counts   brewletv1.RotationNodeCounts
		progress string
		excluded string
	}{
		{name: "installing within its deadline: still rotating",
			reports: []brewletv1.NodeRuntime{allowed(report("a", at(2, vocab.StateReady, "")), 2, before),
				allowed(report("b", at(2, vocab.StateInstalling, "")), 2, after)},
			counts: brewletv1.RotationNodeCounts{Current: 1, Installing: 1}, progress: "True/Rotating"},
		{name: "past its deadline: excluded, complete without it",
			reports: []brewletv1.NodeRuntime{allowed(report("a", at(2, vocab.StateReady, "")), 2, before),
				allowed(report("b", at(2, vocab.StateInstalling, "")), 2, before)},
			counts: brewletv1.RotationNodeCounts{Current: 1, Excluded: 1, Stuck: 1}, progress: "False/CompleteWithExclusions", excluded: "b:NodeTimedOut:2"},
		{name: "allowed and still on the old generation past its deadline",
			reports: []brewletv1.NodeRuntime{allowed(report("a", at(2, vocab.StateReady, "")), 2, before),
				allowed(report("b", at(1, vocab.StateReady, "")), 2, before)},
			counts: brewletv1.RotationNodeCounts{Current: 1, Excluded: 1, Stuck: 1}, progress: "False/CompleteWithExclusions", excluded: "b:NodeTimedOut:1"},
		{name: "a silent node waiting for its wave is excluded",
			reports: []brewletv1.NodeRuntime{allowed(report("a", at(2, vocab.StateReady, "")), 2, before),
				allowed(report("b", at(1, vocab.StateReady, "")), 1, before)},
			silent: silent("b"),
			counts: brewletv1.RotationNodeCounts{Current: 1, Excluded: 1, Stuck: 1}, progress: "False/CompleteWithExclusions", excluded: "b:AgentNotReporting:1"},
		{name: "a node waiting for its wave with a live agent holds the rotation",
			reports: []brewletv1.NodeRuntime{allowed(report("a", at(2, vocab.StateReady, "")), 2, before),
				allowed(report("b", at(1, vocab.StateReady, "")), 1, before)},
			counts: brewletv1.RotationNodeCounts{Current: 1}, progress: "True/Rotating"},
		{name: "every node stuck: not complete",
			reports: []brewletv1.NodeRuntime{allowed(report("a", at(2, vocab.StateInstalling, "")), 2, before)},
			counts:  brewletv1.RotationNodeCounts{Excluded: 1, Stuck: 1}, progress: "True/Rotating", excluded: "a:NodeTimedOut:2"},
		{name: "a stuck node counts no failure: maxFailures 0 does not halt",
			reports: []brewletv1.NodeRuntime{allowed(report("a", at(2, vocab.StateReady, "")), 2, before),
				allowed(report("b", at(2, vocab.StateInstalling, "")), 2, before), allowed(report("c", at(2, vocab.StateInstalling, "")), 2, after)},
			silent: silent("c"),
			counts: brewletv1.RotationNodeCounts{Current: 1, Excluded: 2, Stuck: 2}, progress: "False/CompleteWithExclusions", excluded: "b:NodeTimedOut:2,c:AgentNotReporting:2"},
		// A node's report is its own claim: one that cannot be true counts neither as
		// serving nor as failing, and the node is excluded and named like a stuck one.
		{name: "a report without observedAt is not believed",
			reports: []brewletv1.NodeRuntime{allowed(report("a", at(2, vocab.StateReady, "")), 2, before),
				unobserved(allowed(report("b", at(2, vocab.StateReady, "")), 2, after))},
			counts: brewletv1.RotationNodeCounts{Current: 1, Excluded: 1, Stuck: 1}, progress: "False/CompleteWithExclusions", excluded: "b:ReportInvalid:2"},
		{name: "a node serving the target under another digest is not believed",
			reports: []brewletv1.NodeRuntime{allowed(report("a", at(2, vocab.StateReady, "")), 2, before),
				allowed(report("b", withDigest(at(2, vocab.StateReady, ""), dA)), 2, after)},
			counts: brewletv1.RotationNodeCounts{Current: 1, Excluded: 1, Stuck: 1}, progress: "False/CompleteWithExclusions", excluded: "b:ReportInvalid:2"},
		{name: "a node claiming a generation never assigned is not believed",
			reports: []brewletv1.NodeRuntime{allowed(report("a", at(2, vocab.StateReady, "")), 2, before),
				allowed(report("b", at(9, vocab.StateFailed, "")), 2, after)},
			counts: brewletv1.RotationNodeCounts{Current: 1, Excluded: 1, Stuck: 1}, progress: "False/CompleteWithExclusions", excluded: "b:ReportInvalid:2"},
		{name: "liars alone do not make a rotation: every node unbelievable is not complete",
			reports: []brewletv1.NodeRuntime{allowed(report("a", withDigest(at(2, vocab.StateReady, ""), dA)), 2, before)},
			counts:  brewletv1.RotationNodeCounts{Excluded: 1, Stuck: 1}, progress: "True/Rotating", excluded: "a:ReportInvalid:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.silent
			if s == nil {
				s = noneSilent
			}
			d := Decide(ri(finalized, image(repo+dB), status(uid, 2, dB)), tc.reports, 0, allFresh, s, "", Verdicts{}, t1)
			rot := d.Status.Rotation
			if rot.Nodes != tc.counts {
				t.Errorf("counts %+v, want %+v", rot.Nodes, tc.counts)
			}
			var ex []string
			for _, x := range rot.ExcludedNodes {
				ex = append(ex, fmt.Sprintf("%s:%s:%d", x.Name, x.Reason, x.Generation))
			}
			if got := strings.Join(ex, ","); got != tc.excluded {
				t.Errorf("excluded %q, want %q", got, tc.excluded)
			}
			c := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionRotationProgressing))
			if got := string(c.Status) + "/" + c.Reason; got != tc.progress {
				t.Errorf("RotationProgressing %s (%s), want %s", got, c.Message, tc.progress)
			}
			if tc.excluded != "" && !strings.Contains(c.Message, strings.Split(tc.excluded, ":")[0]+": ") {
				t.Errorf("RotationProgressing message %q does not name the excluded node", c.Message)
			}
			// One Warning per newly stuck node, none when the same pass is repeated.
			stuckEvents := func(evs []Event) int {
				n := 0
				for _, e := range evs {
					if e.Reason == vocab.ReasonNodeTimedOut || e.Reason == vocab.ReasonAgentNotReporting || e.Reason == vocab.ReasonReportInvalid {
						n++
					}
				}
				return n
			}
			if got := stuckEvents(d.Events); got != int(tc.counts.Stuck) {
				t.Errorf("%d stuck-node events, want %d: %+v", got, tc.counts.Stuck, d.Events)
			}
			repeat := ri(finalized, image(repo+dB))
			repeat.Status = d.Status
			if got := stuckEvents(Decide(repeat, tc.reports, 0, allFresh, s, "", Verdicts{}, t1).Events); got != 0 {
				t.Errorf("the same pass again recorded %d stuck-node events", got)
			}
			// Completion is sticky: a stuck node that reports the target later rejoins as
			// current, and the rotation stays complete.
			if rot.RotationCompletedAt != nil {
				again := ri(finalized, image(repo+dB))
				again.Status = d.Status
				var healed []brewletv1.NodeRuntime
				for _, r := range tc.reports {
					r.Status.Runtimes = []brewletv1.NodeRuntimeEntry{at(2, vocab.StateReady, "")}
					r.Status.ObservedAt = &metav1.Time{Time: t1.Add(time.Hour)}
					healed = append(healed, r)
				}
				d2 := Decide(again, healed, 0, allFresh, noneSilent, "", Verdicts{}, metav1.NewTime(t1.Add(time.Hour)))
				if r2 := d2.Status.Rotation; r2.RotationCompletedAt == nil || !r2.RotationCompletedAt.Equal(rot.RotationCompletedAt) || r2.Nodes.Excluded != 0 ||
					!meta.IsStatusConditionTrue(d2.Status.Conditions, string(vocab.ConditionRotationComplete)) {
					t.Errorf("after the stuck nodes rejoined: %+v", r2)
				}
			}
		})
	}
}

// spec.paused shows in the rotation's condition while it is not done.
func TestRotationPaused(t *testing.T) {
	r := ri(finalized, image(repo+dB), status(uid, 2, dB))
	r.Spec.Paused = true
	d := Decide(r, []brewletv1.NodeRuntime{report("a", at(2, vocab.StateReady, "")), report("b", at(1, vocab.StateReady, ""))}, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	c := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionRotationProgressing))
	if c.Status != "False" || c.Reason != string(vocab.ReasonRotationPaused) || !strings.Contains(c.Message, "1 of 2") {
		t.Fatalf("RotationProgressing %+v", c)
	}
	done := Decide(r, []brewletv1.NodeRuntime{report("a", at(2, vocab.StateReady, ""))}, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	if c := meta.FindStatusCondition(done.Status.Conditions, string(vocab.ConditionRotationProgressing)); c.Reason != string(vocab.ReasonAllNodesCurrent) {
		t.Fatalf("a paused rotation that is done: %+v", c)
	}
}

// unobserved is r without the observedAt its agent always writes.
func unobserved(r brewletv1.NodeRuntime) brewletv1.NodeRuntime {
	r.Status.ObservedAt = nil
	return r
}

func withDigest(e brewletv1.NodeRuntimeEntry, digest string) brewletv1.NodeRuntimeEntry {
	e.Digest = digest
	return e
}

// However a node's report is forged, the rotation's status stays writable (bounded, every
// excluded node named with a generation the RuntimeImage has) and no unbelievable node is
// counted as serving.
func FuzzRotationReport(f *testing.F) {
	f.Add(int64(2), int64(0), "Ready", dB, "node-uid", true)
	f.Add(int64(9), int64(9), "Failed", dA, strings.Repeat("u", 300), false)
	f.Add(int64(-1), int64(-7), "Bogus", "", "", true)
	f.Fuzz(func(t *testing.T, gen, failedGen int64, state, digest, nodeUID string, observed bool) {
		liar := report("liar", brewletv1.NodeRuntimeEntry{ID: "python-3.12", Epoch: uid, Generation: gen, FailedGeneration: failedGen, State: state, Digest: digest})
		liar.Status.NodeUID = types.UID(nodeUID)
		if !observed {
			liar.Status.ObservedAt = nil
		}
		honest := report("honest", at(2, vocab.StateReady, ""))
		honest.Status.Runtimes[0].Digest = dB
		d := Decide(ri(finalized, image(repo+dB), status(uid, 2, dB)), []brewletv1.NodeRuntime{honest, liar}, 0, allFresh, noneSilent, "", Verdicts{}, t1)
		rot := d.Status.Rotation
		if rot == nil {
			t.Fatal("no rotation status")
		}
		for _, x := range rot.ExcludedNodes {
			if x.Generation < 0 || x.Generation > 2 || len(x.UID) > 128 {
				t.Fatalf("excluded %+v", x)
			}
		}
		if rot.Nodes.Current > 2 || rot.Nodes.Current+rot.Nodes.Failed+rot.Nodes.Installing+rot.Nodes.Stuck > 2 {
			t.Fatalf("counts %+v from two nodes", rot.Nodes)
		}
		believable := observed && len(nodeUID) <= 128 && gen >= 0 && failedGen >= 0 && gen <= 2 && failedGen <= 2
		if !believable && rot.Nodes.Current > 1 {
			t.Fatalf("an unbelievable report counted as serving: %+v", rot.Nodes)
		}
		if digest != "" && digest != dB && gen == 2 && (state == "Ready" || state == "Available") && rot.Nodes.Current > 1 {
			t.Fatalf("the target served under another digest counted: %+v", rot.Nodes)
		}
	})
}

// A halt quotes what the first failing node says of the target (for a broken promise, the
// diff), bounded, in the condition and so in its event.
func TestRotationHaltSaysWhy(t *testing.T) {
	broken := at(2, vocab.StateFailed, string(vocab.ReasonRuntimePromiseBroken))
	broken.FailedGeneration, broken.Generation, broken.State = 2, 1, string(vocab.StateReady)
	broken.Message = "runtime python-3.12 generation 2 breaks what generation 1 promised: line python changed: \"3.12\" -> \"3.13\""
	long := broken
	long.Message = strings.Repeat("x", 10*maxFailureMessage)
	d := Decide(ri(finalized, image(repo+dB), status(uid, 2, dB)), []brewletv1.NodeRuntime{report("a", broken), report("b", long)}, 0, allFresh, noneSilent, "", Verdicts{}, t1)
	c := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionRotationProgressing))
	if c == nil || c.Reason != string(vocab.ReasonRotationHalted) || !strings.Contains(c.Message, "a reports: "+broken.Message) ||
		!strings.Contains(c.Message, "a: RuntimePromiseBroken") || len(c.Message) > 2*maxFailureMessage {
		t.Fatalf("halted condition %+v", c)
	}
	var halted []Event
	for _, e := range d.Events {
		if e.Reason == vocab.ReasonRotationHalted {
			halted = append(halted, e)
		}
	}
	if len(halted) != 1 || !strings.Contains(halted[0].Message, `line python changed`) {
		t.Fatalf("events %+v", d.Events)
	}
	if got := boundedMessage(long.Message); len(got) > maxFailureMessage+len("…") {
		t.Fatalf("bounded to %d bytes", len(got))
	}
}

// One node refusing a breaking digest within the budget: the rotation is not halted, but its
// condition quotes the diff and one Warning event names the node, once.
func TestRotationSaysWhatBreaks(t *testing.T) {
	broken := at(1, vocab.StateReady, string(vocab.ReasonRuntimePromiseBroken))
	broken.FailedGeneration = 2
	broken.Message = "generation 2 refused, generation 1 stays in use: line python removed"
	r := ri(finalized, image(repo+dB), status(uid, 2, dB))
	d := Decide(r, []brewletv1.NodeRuntime{report("a", broken)}, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	c := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionRotationProgressing))
	if c == nil || c.Reason != string(vocab.ReasonRotating) || !strings.Contains(c.Message, "a reports: "+broken.Message) {
		t.Fatalf("condition %+v", c)
	}
	count := func(evs []Event) int {
		n := 0
		for _, e := range evs {
			if e.Reason == vocab.ReasonRuntimePromiseBroken && e.Type == "Warning" && strings.Contains(e.Message, "node a refused generation 2: "+broken.Message) {
				n++
			}
		}
		return n
	}
	if count(d.Events) != 1 {
		t.Fatalf("events %+v", d.Events)
	}
	r.Status = d.Status
	if n := count(Decide(r, []brewletv1.NodeRuntime{report("a", broken)}, 1, allFresh, noneSilent, "", Verdicts{}, t1).Events); n != 0 {
		t.Fatalf("the same pass again recorded %d events", n)
	}
}
