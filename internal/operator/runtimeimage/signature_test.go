package runtimeimage

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/rollout"
	"brewlet.sh/brewlet/internal/vocab"
)

func TestDecideHoldsUnsignedDigests(t *testing.T) {
	const fp = "0123456789abcdef"
	verified := func(d string) Signature {
		return Signature{State: SignatureVerified, Digest: d, Message: "key k", Requirements: fp}
	}
	missing := func(d string) Signature {
		return Signature{State: SignatureRefused, Digest: d, Reason: vocab.ReasonSignatureMissing, Message: "no bundle", Requirements: fp}
	}
	unknown := func(d string) Signature {
		return Signature{State: SignatureUnknown, Digest: d, Reason: vocab.ReasonSignatureUnverifiable, Message: "registry down", Requirements: fp}
	}
	// approvedMsg is the Approved condition a pass that verified d under fp wrote.
	approvedMsg := func(d, requirements string) riOpt {
		return func(r *brewletv1.RuntimeImage) {
			r.Status.Conditions = []metav1.Condition{{Type: string(vocab.ConditionApproved), Status: metav1.ConditionTrue, Reason: string(vocab.ReasonApproved),
				Message: "generation 2 (" + d + ") of epoch e is approved; signed as required (requirements " + requirements + ")", LastTransitionTime: t0}}
		}
	}
	spec := func(s Signature) Verdicts { return Verdicts{Spec: s} }
	held := func(specSig, cur Signature) Verdicts { return Verdicts{Spec: specSig, Current: cur} }
	otherEpoch := func(r *brewletv1.RuntimeImage) {
		r.Status.Epoch, r.Status.Generation, r.Status.Digest = types.UID("old"), 4, dB
	}
	for _, tc := range []struct {
		name     string
		ri       *brewletv1.RuntimeImage
		sig      Verdicts
		gen      int64
		digest   string
		approved metav1.ConditionStatus
		reason   vocab.Reason
		signed   metav1.ConditionStatus // "": no SignatureVerified condition
	}{
		{name: "not required: approved, no condition", ri: ri(finalized), sig: Verdicts{}, gen: 1, digest: dA,
			approved: metav1.ConditionTrue, reason: vocab.ReasonApproved},
		{name: "first digest signed: generation 1", ri: ri(finalized), sig: spec(verified(dA)), gen: 1, digest: dA,
			approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionTrue},
		{name: "first digest unsigned: no generation, not approved", ri: ri(finalized), sig: spec(missing(dA)), gen: 0, digest: "",
			approved: metav1.ConditionFalse, reason: vocab.ReasonSignatureMissing, signed: metav1.ConditionFalse},
		{name: "first digest unsigned after another epoch: its number is not reused later", ri: ri(finalized, otherEpoch), sig: spec(missing(dA)),
			gen: 4, digest: "", approved: metav1.ConditionFalse, reason: vocab.ReasonSignatureMissing, signed: metav1.ConditionFalse},
		{name: "signed later: generation after the other epoch's", ri: ri(finalized, status(uid, 4, "")), sig: spec(verified(dA)),
			gen: 5, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionTrue},
		{name: "first digest, registry down: approval unknown", ri: ri(finalized), sig: spec(unknown(dA)), gen: 0, digest: "",
			approved: metav1.ConditionUnknown, reason: vocab.ReasonSignatureUnverifiable, signed: metav1.ConditionUnknown},
		{name: "rotation to an unsigned digest: held, the current generation stays approved",
			ri: ri(finalized, image(repo+dB), status(uid, 2, dA), approvedAt(metav1.ConditionTrue, vocab.ReasonApproved, t0)), sig: held(missing(dB), verified(dA)),
			gen: 2, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionFalse},
		{name: "a held rotation does not re-approve a current digest that stopped verifying",
			ri: ri(finalized, image(repo+dB), status(uid, 2, dA), approvedAt(metav1.ConditionFalse, vocab.ReasonSignatureMissing, t0)), sig: held(missing(dB), missing(dA)),
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonSignatureMissing, signed: metav1.ConditionFalse},
		{name: "a held rotation without a verdict on the current digest: approval unknown",
			ri: ri(finalized, image(repo+dB), status(uid, 2, dA), approvedAt(metav1.ConditionTrue, vocab.ReasonApproved, t0)), sig: spec(missing(dB)),
			gen: 2, digest: dA, approved: metav1.ConditionUnknown, reason: vocab.ReasonSignatureUnverifiable, signed: metav1.ConditionFalse},
		{name: "registry down: an approval made for this digest under these requirements is kept",
			ri: ri(finalized, status(uid, 2, dA), approvedMsg(dA, fp)), sig: spec(unknown(dA)),
			gen: 2, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionUnknown},
		{name: "registry down: an approval made under other requirements is not",
			ri: ri(finalized, status(uid, 2, dA), approvedMsg(dA, "fedcba9876543210")), sig: spec(unknown(dA)),
			gen: 2, digest: dA, approved: metav1.ConditionUnknown, reason: vocab.ReasonSignatureUnverifiable, signed: metav1.ConditionUnknown},
		{name: "rotation to a signed digest", ri: ri(finalized, image(repo+dB), status(uid, 2, dA)), sig: spec(verified(dB)),
			gen: 3, digest: dB, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionTrue},
		{name: "approved digest no longer verifies: approval withdrawn",
			ri: ri(finalized, status(uid, 2, dA), approvedAt(metav1.ConditionTrue, vocab.ReasonApproved, t0)), sig: spec(missing(dA)),
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonSignatureMissing, signed: metav1.ConditionFalse},
		{name: "approved without a signature on record, registry down: approval unknown",
			ri: ri(finalized, status(uid, 2, dA), approvedAt(metav1.ConditionTrue, vocab.ReasonApproved, t0)), sig: spec(unknown(dA)),
			gen: 2, digest: dA, approved: metav1.ConditionUnknown, reason: vocab.ReasonSignatureUnverifiable, signed: metav1.ConditionUnknown},
		{name: "refused digest, registry down: not approved",
			ri: ri(finalized, status(uid, 2, dA), approvedAt(metav1.ConditionFalse, vocab.ReasonSignatureMissing, t0)), sig: spec(unknown(dA)),
			gen: 2, digest: dA, approved: metav1.ConditionUnknown, reason: vocab.ReasonSignatureUnverifiable, signed: metav1.ConditionUnknown},
		{name: "revoked wins over verified", ri: ri(finalized, revoked, status(uid, 2, dA)), sig: spec(verified(dA)),
			gen: 2, digest: dA, approved: metav1.ConditionFalse, reason: vocab.ReasonRevoked, signed: metav1.ConditionTrue},
		{name: "a verdict on another digest is no verdict", ri: ri(finalized, image(repo+dB), status(uid, 2, dA)), sig: held(verified(dA), verified(dA)),
			gen: 2, digest: dA, approved: metav1.ConditionTrue, reason: vocab.ReasonApproved, signed: metav1.ConditionUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.ri, nil, rollout.DefaultMaxFailures, allFresh, noneSilent, "", tc.sig, t1)
			if c := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionApproved)); c != nil && c.Status == metav1.ConditionTrue &&
				(tc.sig.Spec.State == SignatureVerified || tc.sig.Current.State == SignatureVerified) && !strings.Contains(c.Message, fp) && c.Reason == string(vocab.ReasonApproved) {
				t.Errorf("Approved %q does not record the requirements it was verified under", c.Message)
			}
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
