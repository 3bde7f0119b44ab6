package runtimeimage

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/rollout"
	"brewlet.sh/brewlet/internal/vocab"
)

func TestDecideHoldsUnsignedDigests(t *testing.T) {
	verified := func(d string) Signature { return Signature{State: SignatureVerified, Digest: d, Message: "key k"} }
	missing := func(d string) Signature {
		return Signature{State: SignatureRefused, Digest: d, Reason: vocab.ReasonSignatureMissing, Message: "no bundle"}
	}
	unknown := func(d string) Signature {
		return Signature{State: SignatureUnknown, Digest: d, Reason: vocab.ReasonSignatureUnverifiable, Message: "registry down"}
	}
	otherEpoch := func(r *brewletv1.RuntimeImage) {
		r.Status.Epoch, r.Status.Generation, r.Status.Digest = types.UID("old"), 4, dB
	}
	for _, tc := range []struct {
		name     string
		ri       *brewletv1.RuntimeImage
		sig      Signature
		gen      int64
		digest   string
		approved metav1.ConditionStatus
		reason   vocab.Reason
		signed   metav1.ConditionStatus // "": no SignatureVerified condition
	}{
		{name: "not required: approved, no condition", ri: ri(finalized), sig: Signature{}, gen: 1, digest: dA,
			approved: metav1.ConditionTrue, reason: vocab.ReasonApproved},
		{name: "first digest signed: generation 1", ri: ri(finalized), sig: verified(dA), gen: 1, digest: dA,
			approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionTrue},
		{name: "first digest unsigned: no generation, not approved", ri: ri(finalized), sig: missing(dA), gen: 0, digest: "",
			approved: metav1.ConditionFalse, reason: vocab.ReasonSignatureMissing, signed: metav1.ConditionFalse},
		{name: "first digest unsigned after another epoch: its number is not reused later", ri: ri(finalized, otherEpoch), sig: missing(dA),
			gen: 4, digest: "", approved: metav1.ConditionFalse, reason: vocab.ReasonSignatureMissing, signed: metav1.ConditionFalse},
		{name: "signed later: generation after the other epoch's", ri: ri(finalized, status(uid, 4, "")), sig: verified(dA),
			gen: 5, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionTrue},
		{name: "first digest, registry down: approval unknown", ri: ri(finalized), sig: unknown(dA), gen: 0, digest: "",
			approved: metav1.ConditionUnknown, reason: vocab.ReasonSignatureUnverifiable, signed: metav1.ConditionUnknown},
		{name: "rotation to an unsigned digest: held, the current generation stays approved",
			ri: ri(finalized, image(repo+dB), status(uid, 2, dA), approvedAt(metav1.ConditionTrue, vocab.ReasonApproved, t0)), sig: missing(dB),
			gen: 2, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionFalse},
		{name: "rotation to a signed digest", ri: ri(finalized, image(repo+dB), status(uid, 2, dA)), sig: verified(dB),
			gen: 3, digest: dB, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionTrue},
		{name: "approved digest no longer verifies: approval withdrawn",
			ri: ri(finalized, status(uid, 2, dA), approvedAt(metav1.ConditionTrue, vocab.ReasonApproved, t0)), sig: missing(dA),
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonSignatureMissing, signed: metav1.ConditionFalse},
		{name: "approved digest, registry down: approval kept",
			ri: ri(finalized, status(uid, 2, dA), approvedAt(metav1.ConditionTrue, vocab.ReasonApproved, t0)), sig: unknown(dA),
			gen: 2, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionUnknown},
		{name: "refused digest, registry down: refusal kept",
			ri: ri(finalized, status(uid, 2, dA), approvedAt(metav1.ConditionFalse, vocab.ReasonSignatureMissing, t0)), sig: unknown(dA),
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonSignatureMissing, signed: metav1.ConditionUnknown},
		{name: "revoked wins over verified", ri: ri(finalized, revoked, status(uid, 2, dA)), sig: verified(dA),
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonRevoked, signed: metav1.ConditionTrue},
		{name: "a verdict on another digest is no verdict", ri: ri(finalized, image(repo+dB), status(uid, 2, dA)), sig: verified(dA),
			gen: 2, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.ri, nil, rollout.DefaultMaxFailures, allFresh, noneSilent, "", tc.sig, t1)
			st := d.Status
			if st.Epoch != uid || st.Generation != tc.gen || st.Digest != tc.digest {
				t.Fatalf("status = epoch %q generation %d digest %q; want %q %d %q", st.Epoch, st.Generation, st.Digest, uid, tc.gen, tc.digest)
			}
			c := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionApproved))
			if c == nil || c.Status != tc.approved || c.Reason != string(tc.reason) {
				t.Fatalf("Approved = %+v; want %s/%s", c, tc.approved, tc.reason)
			}
			s := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionSignatureVerified))
			switch {
			case tc.signed == "" && s != nil:
				t.Fatalf("SignatureVerified = %+v; want none", s)
			case tc.signed != "" && (s == nil || s.Status != tc.signed):
				t.Fatalf("SignatureVerified = %+v; want %s", s, tc.signed)
			}
		})
	}
}
