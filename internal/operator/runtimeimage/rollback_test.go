package runtimeimage

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

const (
	dC = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
	// otherRepo: generation 2 came from another repository than the spec names now.
	otherRepo = "registry.example/runtimes/python-old@"
)

// halted is a RuntimeImage whose generation 3 (dB) replaced generation 2 (dA) and whose
// restarted workloads failed past the budget.
func halted(opts ...riOpt) *brewletv1.RuntimeImage {
	r := ri(finalized, image(repo+dB), status(uid, 3, dB), approvedAt(metav1.ConditionTrue, vocab.ReasonApproved, t0))
	r.Status.Previous = &brewletv1.GenerationRef{Generation: 2, Digest: dA, Image: otherRepo + dA}
	r.Status.Rotation = &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: 3, Digest: dB},
		RestartsHalted: &brewletv1.RestartsHalt{Failed: 2, MaxFailures: 1, Message: "2 restarted workload(s) failed: shop/web, shop/api"},
		Restarts:       []brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "shop", Name: "web", Outcome: "Failed", Reason: "PodsFailing", Message: "pod web-1 crash-looping"}}}
	for _, o := range opts {
		o(r)
	}
	return r
}

func TestRollback(t *testing.T) {
	onFailure := func(p string) riOpt { return func(r *brewletv1.RuntimeImage) { r.Spec.OnFailure = p } }
	for _, tc := range []struct {
		name     string
		ri       *brewletv1.RuntimeImage
		sigs     Verdicts
		gen      int64
		digest   string
		cond     metav1.ConditionStatus // "" absent
		reason   vocab.Reason
		event    bool
		approved metav1.ConditionStatus
	}{
		{"restarts halted: generation 4 serves generation 2's digest", halted(), Verdicts{}, 4, dA, metav1.ConditionTrue, vocab.ReasonRolledBack, true, metav1.ConditionTrue},
		{"spec.onFailure Halt keeps the generation", halted(onFailure(brewletv1.OnFailureHalt)), Verdicts{}, 3, dB, "", "", false, metav1.ConditionTrue},
		{"nothing to go back to", halted(func(r *brewletv1.RuntimeImage) { r.Status.Previous = nil }), Verdicts{}, 3, dB, metav1.ConditionFalse, vocab.ReasonRollbackUnavailable, false, metav1.ConditionTrue},
		{"the previous digest's signature fails now",
			halted(), Verdicts{Spec: Signature{State: SignatureVerified, Digest: dB}, Previous: Signature{State: SignatureRefused, Digest: dA, Reason: vocab.ReasonSignatureInvalid, Message: "no valid bundle"}},
			3, dB, metav1.ConditionFalse, vocab.ReasonRollbackUnavailable, false, metav1.ConditionTrue},
		{"signed previous digest: approved on its own verdict",
			halted(), Verdicts{Spec: Signature{State: SignatureVerified, Digest: dB, Requirements: "f"}, Previous: Signature{State: SignatureVerified, Digest: dA, Requirements: "f"}},
			4, dA, metav1.ConditionTrue, vocab.ReasonRolledBack, true, metav1.ConditionTrue},
		{"a halt of another target is not this generation's", halted(func(r *brewletv1.RuntimeImage) { r.Status.Rotation.Target.Generation = 2 }), Verdicts{}, 3, dB, "", "", false, metav1.ConditionTrue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.ri, nil, 1, allFresh, noneSilent, "", tc.sigs, t1)
			st := d.Status
			if st.Generation != tc.gen || st.Digest != tc.digest {
				t.Fatalf("generation %d %s, want %d %s", st.Generation, st.Digest, tc.gen, tc.digest)
			}
			c := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionRolledBack))
			switch {
			case tc.cond == "" && c != nil:
				t.Fatalf("unexpected RolledBack condition %+v", c)
			case tc.cond != "" && (c == nil || c.Status != tc.cond || c.Reason != string(tc.reason)):
				t.Fatalf("RolledBack %+v, want %s/%s", c, tc.cond, tc.reason)
			}
			if a := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionApproved)); a == nil || a.Status != tc.approved {
				t.Fatalf("Approved %+v, want %s", a, tc.approved)
			}
			var events int
			for _, e := range d.Events {
				if e.Reason == vocab.ReasonRolledBack {
					events++
					for _, want := range []string{dB, dA, "generation 3", "Generation 4", "shop/web", "Deployment shop/web failed (PodsFailing): pod web-1 crash-looping"} {
						if !strings.Contains(e.Message, want) {
							t.Errorf("the event does not say %q: %s", want, e.Message)
						}
					}
				}
			}
			if (events == 1) != tc.event || events > 1 {
				t.Fatalf("%d RolledBack events, want one: %v", events, tc.event)
			}
			if tc.gen == 4 {
				rb := st.RolledBack
				if rb == nil || rb.Generation != 4 || rb.To != (brewletv1.GenerationRef{Generation: 2, Digest: dA, Image: otherRepo + dA}) || rb.Bad.Generation != 3 || rb.Bad.Digest != dB ||
					st.Image != otherRepo+dA ||
					st.Rotation == nil || st.Rotation.Target.Generation != 4 || st.Rotation.RestartsHalted != nil || !st.SameBytes(2) || st.SameBytes(3) {
					t.Fatalf("rollback record %+v, rotation %+v", rb, st.Rotation)
				}
			}
		})
	}
}

// After a rollback the bad digest is not assigned again while the spec names it; once the
// spec named another digest, naming it again is a new decision. The rollback generation
// is not rolled back in turn, and the next digest is a plain rotation from it.
func TestRollbackHoldsTheBadDigest(t *testing.T) {
	d := Decide(halted(), nil, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	r := halted()
	r.Status = d.Status
	again := Decide(r, nil, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	if again.Status.Generation != 4 || again.Status.Digest != dA || len(again.Events) != 0 {
		t.Fatalf("the spec still names the bad digest: generation %d %s, events %+v; want 4 kept, nothing new", again.Status.Generation, again.Status.Digest, again.Events)
	}
	// The rollback generation's restarts halt too: nothing older is known good.
	r.Status.Rotation = &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: 4, Digest: dA},
		RestartsHalted: &brewletv1.RestartsHalt{Failed: 2, Message: "failed again"}}
	if d := Decide(r, nil, 1, allFresh, noneSilent, "", Verdicts{}, t1); d.Status.Generation != 4 {
		t.Fatalf("a rollback generation was rolled back: generation %d", d.Status.Generation)
	}
	// The spec names the good digest: the bad one is released, nothing else changes.
	r.Spec.Source.Image = repo + dA
	named := Decide(r, nil, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	if named.Status.Generation != 4 || named.Status.RolledBack == nil || !named.Status.RolledBack.Released {
		t.Fatalf("spec back on the good digest: %+v", named.Status.RolledBack)
	}
	r.Status = named.Status
	r.Spec.Source.Image = repo + dB
	if d := Decide(r, nil, 1, allFresh, noneSilent, "", Verdicts{}, t1); d.Status.Generation != 5 || d.Status.Digest != dB {
		t.Fatalf("the bad digest named again after another: generation %d %s, want 5 %s", d.Status.Generation, d.Status.Digest, dB)
	}
	// A new digest after the rollback: generation 5, rolled back to from 4 if it fails.
	r.Spec.Source.Image = repo + dC
	n := Decide(r, nil, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	if n.Status.Generation != 5 || n.Status.Digest != dC || n.Status.Previous == nil || *n.Status.Previous != (brewletv1.GenerationRef{Generation: 4, Digest: dA, Image: repo + dA}) ||
		n.Status.RolledBack != nil || meta.FindStatusCondition(n.Status.Conditions, string(vocab.ConditionRolledBack)) != nil {
		t.Fatalf("the next rotation: %+v", n.Status)
	}
}

// The previous generation's signature is looked up where it came from, not in the
// repository the spec names now (a rotation to another runtime family's repository).
func TestImageOfAGeneration(t *testing.T) {
	for _, tc := range []struct {
		g    brewletv1.GenerationRef
		want string
	}{
		{brewletv1.GenerationRef{Digest: dA, Image: otherRepo + dA}, otherRepo + dA},
		{brewletv1.GenerationRef{Digest: dA}, repo + dA},
		{brewletv1.GenerationRef{Digest: dA, Image: otherRepo + dB}, repo + dA}, // a record that does not match is not used
	} {
		if got := tc.g.PullFrom(repo + dB); got != tc.want {
			t.Errorf("PullFrom(%+v) = %s, want %s", tc.g, got, tc.want)
		}
	}
}

// The signatures looked up: the spec's digest; the current generation's where it came from
// (after a rollback the spec's repository may not hold it); the previous generation's
// while a rollback to it is due.
func TestImagesToCheck(t *testing.T) {
	r := halted(image(otherRepo + dB))
	r.Spec.Source.Image = repo + dB
	if got := imagesToCheck(r); got[0] != repo+dB || got[1] != "" || got[2] != otherRepo+dA {
		t.Fatalf("a rollback due: %q", got)
	}
	d := Decide(r, nil, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	r.Status = d.Status
	if got := imagesToCheck(r); got[0] != repo+dB || got[1] != otherRepo+dA || got[2] != "" {
		t.Fatalf("rolled back: %q", got)
	}
}
