package runtimeimage

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/rollout"
	"brewlet.sh/brewlet/internal/vocab"
)

const (
	uid  = types.UID("11111111-2222-3333-4444-555555555555")
	dA   = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	dB   = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	repo = "registry.example/runtimes/python@"
)

var (
	t0  = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1  = metav1.NewTime(t0.Add(time.Hour))
	del = metav1.NewTime(t0.Add(time.Minute))
)

type riOpt func(*brewletv1.RuntimeImage)

func image(img string) riOpt { return func(r *brewletv1.RuntimeImage) { r.Spec.Source.Image = img } }
func status(epoch types.UID, gen int64, digest string) riOpt {
	return func(r *brewletv1.RuntimeImage) {
		r.Status.Epoch, r.Status.Generation, r.Status.Digest = epoch, gen, digest
	}
}
func revoked(r *brewletv1.RuntimeImage)   { r.Spec.Revoked = true }
func deleting(r *brewletv1.RuntimeImage)  { r.DeletionTimestamp = &del }
func finalized(r *brewletv1.RuntimeImage) { r.Finalizers = []string{vocab.FinalizerRevocation} }
func approvedAt(s metav1.ConditionStatus, reason vocab.Reason, at metav1.Time) riOpt {
	return func(r *brewletv1.RuntimeImage) {
		r.Status.Conditions = []metav1.Condition{{Type: string(vocab.ConditionApproved), Status: s, Reason: string(reason), LastTransitionTime: at}}
	}
}

func ri(opts ...riOpt) *brewletv1.RuntimeImage {
	r := &brewletv1.RuntimeImage{
		ObjectMeta: metav1.ObjectMeta{Name: "python-3.12", UID: uid, Generation: 3},
		Spec:       brewletv1.RuntimeImageSpec{Source: brewletv1.RuntimeImageSource{Image: repo + dA}},
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

func report(node string, entries ...brewletv1.NodeRuntimeEntry) brewletv1.NodeRuntime {
	n := brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: node}}
	n.Status.Runtimes = entries
	n.Status.ObservedAt = &metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return n
}

func entry(id string, epoch types.UID, state vocab.RuntimeState) brewletv1.NodeRuntimeEntry {
	return brewletv1.NodeRuntimeEntry{ID: id, Epoch: epoch, Generation: 1, State: string(state)}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ri              *brewletv1.RuntimeImage
		reports         []brewletv1.NodeRuntime
		gen             int64
		digest          string
		approved        metav1.ConditionStatus
		reason          vocab.Reason
		transition      metav1.Time
		add, release    bool
		holders         []string
		messageContains string
	}{
		{name: "first sight: generation 1, finalizer added", ri: ri(),
			gen: 1, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, transition: t1, add: true},
		{name: "steady state changes nothing", ri: ri(finalized, status(uid, 4, dA), approvedAt(metav1.ConditionTrue, vocab.ReasonApproved, t0)),
			gen: 4, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, transition: t0},
		{name: "rotation: +1", ri: ri(finalized, image(repo+dB), status(uid, 4, dA)),
			gen: 5, digest: dB, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved},
		{name: "back to an earlier digest is a new generation, never a reused one", ri: ri(finalized, status(uid, 5, dB)),
			gen: 6, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved},
		{name: "same digest from another repository keeps the generation",
			ri:  ri(finalized, image("mirror.example/python@"+dA), status(uid, 4, dA)),
			gen: 4, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved},
		{name: "status of another epoch is not trusted, its number not reused", ri: ri(finalized, status("other-uid", 7, dA)),
			gen: 8, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved},
		{name: "revoked: Approved=False/Revoked, generation kept",
			ri:  ri(finalized, revoked, status(uid, 2, dA), approvedAt(metav1.ConditionTrue, vocab.ReasonApproved, t0)),
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonRevoked, transition: t1, messageContains: "spec.revoked"},
		{name: "un-revoked: re-approved in the same epoch",
			ri:  ri(finalized, status(uid, 2, dA), approvedAt(metav1.ConditionFalse, vocab.ReasonRevoked, t0)),
			gen: 2, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, transition: t1},
		{name: "revoked and rotated: both recorded", ri: ri(finalized, revoked, image(repo+dB), status(uid, 2, dA)),
			gen: 3, digest: dB, approved: metav1.ConditionFalse, reason: vocab.ReasonRevoked},
		{name: "deleting, nothing holds: release",
			ri:  ri(finalized, deleting, status(uid, 2, dA)),
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonDeleting, release: true},
		{name: "deleting wins over revoked", ri: ri(finalized, deleting, revoked, status(uid, 2, dA)),
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonDeleting, release: true},
		{name: "deleting, nodes hold the epoch: wait",
			ri: ri(finalized, deleting, status(uid, 2, dA)),
			reports: []brewletv1.NodeRuntime{
				report("n2", entry("python-3.12", uid, vocab.StateInstalling)),
				report("n1", entry("python-3.12", uid, vocab.StateReady)),
				report("n3", entry("python-3.12", uid, vocab.StateFailed)),
				report("n4", entry("python-3.12", uid, vocab.StateAvailable)),
			},
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonDeleting,
			holders: []string{"n1", "n2", "n3", "n4"}, messageContains: "n1, n2, n3, n4"},
		{name: "deleting, withdrawn, other epochs, other IDs and absent nodes do not hold",
			ri: ri(finalized, deleting, status(uid, 2, dA)),
			reports: []brewletv1.NodeRuntime{
				report("revoked", entry("python-3.12", uid, vocab.StateRevoked)),
				report("revoked-no-epoch", entry("python-3.12", "", vocab.StateRevoked)),
				report("old-epoch", entry("python-3.12", "old", vocab.StateReady)),
				report("other-id", entry("jre-21", uid, vocab.StateReady)),
				report("nothing"),
			},
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonDeleting, release: true},
		{name: "deleting without our finalizer: nothing to release, nothing added",
			ri:  ri(deleting, status(uid, 2, dA)),
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonDeleting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.ri.DeepCopy()
			d := Decide(tc.ri, tc.reports, rollout.DefaultMaxFailures, allFresh, noneSilent, "", Verdicts{}, t1)
			if !equality.Semantic.DeepEqual(before, tc.ri) {
				t.Fatal("Decide modified its input")
			}
			st := d.Status
			if st.Epoch != uid || st.Generation != tc.gen || st.Digest != tc.digest || st.ObservedGeneration != 3 {
				t.Fatalf("status = epoch %q generation %d digest %q observed %d; want %q %d %q 3",
					st.Epoch, st.Generation, st.Digest, st.ObservedGeneration, uid, tc.gen, tc.digest)
			}
			c := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionApproved))
			if c == nil || c.Status != tc.approved || c.Reason != string(tc.reason) || c.ObservedGeneration != 3 {
				t.Fatalf("Approved = %+v; want %s/%s", c, tc.approved, tc.reason)
			}
			if !tc.transition.IsZero() && !c.LastTransitionTime.Equal(&tc.transition) {
				t.Fatalf("Approved transition %v; want %v", c.LastTransitionTime, tc.transition)
			}
			if !strings.Contains(c.Message, tc.messageContains) {
				t.Fatalf("Approved message %q does not mention %q", c.Message, tc.messageContains)
			}
			if d.AddFinalizer != tc.add || d.ReleaseFinalizer != tc.release {
				t.Fatalf("finalizer add=%v release=%v; want %v %v", d.AddFinalizer, d.ReleaseFinalizer, tc.add, tc.release)
			}
			if strings.Join(d.Holders, ",") != strings.Join(tc.holders, ",") {
				t.Fatalf("holders %v; want %v", d.Holders, tc.holders)
			}
		})
	}
}

// A decision applied to its own result is a fixed point: the reconciler writes only on
// change, so a second pass must find nothing to write.
func TestDecideIsIdempotent(t *testing.T) {
	for _, r := range []*brewletv1.RuntimeImage{ri(), ri(revoked), ri(image(repo + dB)), ri(deleting, finalized)} {
		first := Decide(r, nil, rollout.DefaultMaxFailures, allFresh, noneSilent, "", Verdicts{}, t0)
		r.Status = first.Status
		second := Decide(r, nil, rollout.DefaultMaxFailures, allFresh, noneSilent, "", Verdicts{}, t1)
		if !equality.Semantic.DeepEqual(first.Status, second.Status) {
			t.Fatalf("second pass changed the status:\n%+v\n%+v", first.Status, second.Status)
		}
	}
}

func TestDecideKeepsFieldsItDoesNotOwn(t *testing.T) {
	r := ri(finalized, status(uid, 1, dA))
	restarts := []brewletv1.WorkloadRestart{{}}
	r.Status.Rotation = &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: 1, Digest: dA}, Restarts: restarts}
	d := Decide(r, nil, rollout.DefaultMaxFailures, allFresh, noneSilent, "", Verdicts{}, t0)
	if d.Status.Rotation == nil || len(d.Status.Rotation.Restarts) != 1 {
		t.Fatalf("Decide dropped fields other controllers own: %+v", d.Status)
	}
}

func TestHolderMessageBounded(t *testing.T) {
	var reports []brewletv1.NodeRuntime
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		reports = append(reports, report(n, entry("python-3.12", uid, vocab.StateReady)))
	}
	d := Decide(ri(finalized, deleting), reports, rollout.DefaultMaxFailures, allFresh, noneSilent, "", Verdicts{}, t0)
	c := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionApproved))
	if !strings.Contains(c.Message, "a, b, c, d, e and 2 more") {
		t.Fatalf("message %q", c.Message)
	}
}

func TestDigestOf(t *testing.T) {
	for in, want := range map[string]string{
		repo + dA:                    dA,
		"localhost:5000/x/y@" + dB:   dB,
		"registry.example/no-digest": "",
	} {
		if got := DigestOf(in); got != want {
			t.Errorf("DigestOf(%q) = %q; want %q", in, got, want)
		}
	}
}
