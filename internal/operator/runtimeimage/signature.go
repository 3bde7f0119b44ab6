package runtimeimage

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// SignatureState is what the operator knows about the signature of one digest.
type SignatureState int

const (
	// SignatureNotRequired: neither spec.verification nor the cluster asks for one.
	SignatureNotRequired SignatureState = iota
	// SignatureVerified: every requirement is met.
	SignatureVerified
	// SignatureRefused: missing or invalid (Reason, Message say which and what to do).
	SignatureRefused
	// SignatureUnknown: the registry could not be asked (Message says why).
	SignatureUnknown
)

// Signature is the verdict on the signature of one digest, made by the reconciler (it
// needs the registry) and handed to Decide.
type Signature struct {
	State   SignatureState
	Digest  string
	Reason  vocab.Reason
	Message string
	// Requirements is the fingerprint of the requirements the verdict was made under.
	Requirements string
}

// holds says whether the verdict keeps its digest from being taken as a generation: it is
// required and not verified.
func (s Signature) holds() bool {
	return s.State == SignatureRefused || s.State == SignatureUnknown
}

// about returns s when it is a verdict on digest, else an Unknown one: a verdict on another
// digest says nothing about this one.
func (s Signature) about(digest string) Signature {
	if s.State == SignatureNotRequired || s.Digest == digest {
		return s
	}
	return Signature{State: SignatureUnknown, Digest: digest, Reason: vocab.ReasonSignatureUnverifiable,
		Message: fmt.Sprintf("no verdict on %s yet", digest), Requirements: s.Requirements}
}

// approvedUnder is what an Approved message records about the signature it rests on, so
// that a pass whose registry does not answer can tell whether that approval was made for
// the same digest under the same requirements.
func approvedUnder(s Signature) string {
	return fmt.Sprintf("signed as required (requirements %s)", s.Requirements)
}

// approval decides Approved for a RuntimeImage neither deleted nor revoked. Where a
// signature is required, the verdict used is the one on the generation's digest (st.Digest,
// or the spec's when the epoch has none yet): the spec's, or, while a rotation is held, the
// current generation's, so a rotation to an unsigned digest can never re-approve a current
// digest that stopped verifying. Verified is True, recording the requirements it was
// verified under; Refused is False. Unknown keeps the previous approval only when it was
// made for this digest under the same requirements; otherwise it is Unknown, which no node
// takes as an approval.
func approval(ri *brewletv1.RuntimeImage, st brewletv1.RuntimeImageStatus, v Verdicts, digest string) (metav1.ConditionStatus, vocab.Reason, string) {
	target, sig := st.Digest, v.Spec.about(digest)
	if target == "" {
		target = digest
	} else if target != digest {
		sig = v.Current.about(target)
		if v.Spec.State != SignatureNotRequired && sig.State == SignatureNotRequired {
			// Both digests are judged by the same requirements: a missing verdict is not "none
			// required".
			sig = Signature{State: SignatureUnknown, Digest: target, Reason: vocab.ReasonSignatureUnverifiable,
				Message: fmt.Sprintf("no verdict on %s yet", target), Requirements: v.Spec.Requirements}
		}
	}
	switch sig.State {
	case SignatureNotRequired, SignatureVerified:
		msg := fmt.Sprintf("generation %d (%s) of epoch %s is approved", st.Generation, st.Digest, ri.UID)
		if sig.State == SignatureVerified {
			msg += "; " + approvedUnder(sig)
		}
		return metav1.ConditionTrue, vocab.ReasonApproved, msg
	case SignatureUnknown:
		if prev := meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionApproved)); prev != nil && st.Digest != "" &&
			strings.Contains(prev.Message, target) && strings.Contains(prev.Message, approvedUnder(sig)) {
			return prev.Status, vocab.Reason(prev.Reason), prev.Message
		}
		return metav1.ConditionUnknown, vocab.ReasonSignatureUnverifiable,
			fmt.Sprintf("the signature of %s could not be checked under the current requirements: %s", target, sig.Message)
	}
	return metav1.ConditionFalse, sig.Reason, fmt.Sprintf("%s is not approved: %s", target, sig.Message)
}

// signatureCondition is SignatureVerified for the spec's digest; nil when none is required.
func signatureCondition(ri *brewletv1.RuntimeImage, st brewletv1.RuntimeImageStatus, sig Signature) *metav1.Condition {
	if sig.State == SignatureNotRequired {
		return nil
	}
	c := &metav1.Condition{Type: string(vocab.ConditionSignatureVerified), ObservedGeneration: ri.Generation}
	switch sig.State {
	case SignatureVerified:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, string(vocab.ReasonSignatureVerified), fmt.Sprintf("%s is signed: %s", sig.Digest, sig.Message)
		return c
	case SignatureUnknown:
		c.Status, c.Reason = metav1.ConditionUnknown, string(vocab.ReasonSignatureUnverifiable)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, string(sig.Reason)
	}
	c.Message = sig.Message
	if st.Digest != "" && st.Digest != sig.Digest {
		c.Message = fmt.Sprintf("%s; the rotation to it is held: nodes stay on generation %d (%s)", sig.Message, st.Generation, st.Digest)
	}
	return c
}
