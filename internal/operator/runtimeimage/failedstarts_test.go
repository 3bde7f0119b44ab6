package runtimeimage

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// rotated is generation 3 (dB) replacing generation 2 (dA), assigned at t0, with no
// failure recorded yet.
func rotated(opts ...riOpt) *brewletv1.RuntimeImage {
	r := ri(finalized, image(repo+dB), status(uid, 3, dB), approvedAt(metav1.ConditionTrue, vocab.ReasonApproved, t0))
	r.Status.Previous = &brewletv1.GenerationRef{Generation: 2, Digest: dA}
	r.Status.Rotation = &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: 3, Digest: dB, AssignedAt: t0}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// withFailures is a node report holding failed starts.
func withFailures(node string, fs ...brewletv1.NodeFailedStart) brewletv1.NodeRuntime {
	n := report(node, brewletv1.NodeRuntimeEntry{ID: "python-3.12", Epoch: uid, Generation: 3, Digest: dB, State: string(vocab.StateReady)})
	n.Status.FailedStarts = fs
	return n
}

// failed is a container of pod that exited with code 1 at t0+after on generation gen.
func failed(pod string, gen int64, after time.Duration) brewletv1.NodeFailedStart {
	return brewletv1.NodeFailedStart{PodNamespace: "shop", PodName: pod, PodUID: types.UID("uid-" + pod), ContainerName: "app",
		ID: "python-3.12", Epoch: uid, Generation: gen, ExitCode: 1, ExitedAt: metav1.NewTime(t0.Add(after))}
}

func TestFailedStartsOf(t *testing.T) {
	now := metav1.NewTime(t0.Add(5 * time.Minute))
	other := func(f brewletv1.NodeFailedStart) brewletv1.NodeFailedStart { f.ID = "node-20"; return f }
	otherEpoch := func(f brewletv1.NodeFailedStart) brewletv1.NodeFailedStart { f.Epoch = "old"; return f }
	for _, tc := range []struct {
		name            string
		ri              *brewletv1.RuntimeImage
		reports         []brewletv1.NodeRuntime
		budget          int
		nodes, pods     int32 // -1: no sum
		exceeded        bool
		named, notNamed string
	}{
		{"one failing node within a budget of one", rotated(), []brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 3, time.Minute))}, 1, 1, 1, false, "shop/web-1 container app on n1 (exit code 1)", ""},
		{"two failing nodes past a budget of one", rotated(), []brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 3, time.Minute)), withFailures("n2", failed("web-2", 3, time.Minute))}, 1, 2, 2, true, "shop/web-2", ""},
		{"one node's many failures count it once", rotated(), []brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 3, time.Minute), failed("web-2", 3, time.Minute), failed("web-3", 3, time.Minute))}, 1, 1, 3, false, "web-3", ""},
		{"a budget of zero: the first node fails it", rotated(), []brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 3, time.Minute))}, 0, 1, 1, true, "web-1", ""},
		{"a pod that failed on the older generation too is its own problem", rotated(),
			[]brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 3, time.Minute), failed("web-1", 2, -time.Minute))}, 0, -1, -1, false, "", ""},
		{"failures on the older generation only", rotated(), []brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 2, time.Minute))}, 0, -1, -1, false, "", ""},
		{"another runtime's and another epoch's containers", rotated(), []brewletv1.NodeRuntime{withFailures("n1", other(failed("web-1", 3, time.Minute)), otherEpoch(failed("web-2", 3, time.Minute)))}, 0, -1, -1, false, "", ""},
		{"a generation past the target (a lying node)", rotated(), []brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 4, time.Minute))}, 0, -1, -1, false, "", ""},
		{"before the assignment (clock skew allowed)", rotated(), []brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 3, -30*time.Second)), withFailures("n2", failed("web-2", 3, -2*time.Minute))}, 0, 1, 1, true, "web-1", "web-2"},
		{"past the health window after completion", rotated(func(r *brewletv1.RuntimeImage) {
			done := metav1.NewTime(t0.Add(-time.Hour))
			r.Status.Rotation.RotationCompletedAt = &done
		}), []brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 3, time.Minute))}, 0, -1, -1, false, "", ""},
		{"the first generation of an epoch is not judged", rotated(func(r *brewletv1.RuntimeImage) { r.Status.Previous = nil }),
			[]brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 3, time.Minute))}, 0, -1, -1, false, "", ""},
		{"a rollback generation is not judged", rotated(func(r *brewletv1.RuntimeImage) {
			r.Status.RolledBack = &brewletv1.Rollback{Generation: 3, To: brewletv1.GenerationRef{Generation: 1, Digest: dB}, Bad: brewletv1.GenerationRef{Generation: 2, Digest: dA}}
		}), []brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 3, time.Minute))}, 0, -1, -1, false, "", ""},
		{"an exceeded sum is kept as it was once the records age out", rotated(func(r *brewletv1.RuntimeImage) {
			r.Status.Rotation.FailedStarts = &brewletv1.FailedStarts{Nodes: 2, Pods: 2, MaxFailures: 1, Exceeded: true, Message: "web-9"}
		}), nil, 1, 2, 2, true, "web-9", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.ri.Status.DeepCopy()
			got := failedStartsOf(tc.ri, st, st.Rotation, tc.reports, tc.budget, now)
			if tc.nodes < 0 {
				if got != nil {
					t.Fatalf("counted %+v, want nothing", got)
				}
				return
			}
			if got == nil || got.Nodes != tc.nodes || got.Pods != tc.pods || got.Exceeded != tc.exceeded {
				t.Fatalf("got %+v, want %d node(s) %d pod(s) exceeded=%v", got, tc.nodes, tc.pods, tc.exceeded)
			}
			if !strings.Contains(got.Message, tc.named) || (tc.notNamed != "" && strings.Contains(got.Message, tc.notNamed)) || len(got.Message) > 1024 {
				t.Fatalf("message %q: want %q named, %q not", got.Message, tc.named, tc.notNamed)
			}
		})
	}
}

// Containers failing to start on the target on more nodes than the budget roll it back in
// the same pass, with reason FailedStarts and a Warning event; under spec.onFailure Halt
// the generation stays and the event still says why.
func TestFailedStartsRollBack(t *testing.T) {
	reports := []brewletv1.NodeRuntime{withFailures("n1", failed("web-1", 3, time.Minute)), withFailures("n2", failed("api-1", 3, time.Minute))}
	now := metav1.NewTime(t0.Add(5 * time.Minute))
	d := Decide(rotated(), reports, 1, allFresh, noneSilent, "", Verdicts{}, now)
	rb := d.Status.RolledBack
	if d.Status.Generation != 4 || d.Status.Digest != dA || rb == nil || rb.Reason != string(vocab.ReasonFailedStarts) ||
		!strings.Contains(rb.Message, "new containers") || !strings.Contains(rb.Message, "shop/api-1 container app on n2") {
		t.Fatalf("generation %d %s, rollback %+v; want generation 4 serving %s for failed starts", d.Status.Generation, d.Status.Digest, rb, dA)
	}
	if c := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionRolledBack)); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("RolledBack condition %+v", c)
	}
	if d.Status.Rotation.FailedStarts != nil {
		t.Fatalf("the rollback generation carries the bad one's failed starts: %+v", d.Status.Rotation.FailedStarts)
	}
	reasons := map[vocab.Reason]int{}
	for _, e := range d.Events {
		reasons[e.Reason]++
	}
	if reasons[vocab.ReasonFailedStarts] != 1 || reasons[vocab.ReasonRolledBack] != 1 {
		t.Fatalf("events %+v; want one FailedStarts and one RolledBack", d.Events)
	}

	halt := Decide(rotated(func(r *brewletv1.RuntimeImage) { r.Spec.OnFailure = brewletv1.OnFailureHalt }), reports, 1, allFresh, noneSilent, "", Verdicts{}, now)
	if halt.Status.Generation != 3 || !halt.Status.Rotation.FailedStarts.IsExceeded() || len(halt.Events) == 0 || halt.Events[0].Reason != vocab.ReasonFailedStarts {
		t.Fatalf("Halt: generation %d, failed starts %+v, events %+v", halt.Status.Generation, halt.Status.Rotation.FailedStarts, halt.Events)
	}
	// Within the budget: counted, shown, nothing else.
	within := Decide(rotated(), reports[:1], 1, allFresh, noneSilent, "", Verdicts{}, now)
	if within.Status.Generation != 3 || within.Status.Rotation.FailedStarts == nil || within.Status.Rotation.FailedStarts.Exceeded {
		t.Fatalf("within the budget: generation %d, failed starts %+v", within.Status.Generation, within.Status.Rotation.FailedStarts)
	}
}
