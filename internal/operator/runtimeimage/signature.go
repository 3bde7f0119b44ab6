package runtimeimage

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// SignatureState is what the operator knows about the signature of spec.source.image.
type SignatureState int

const (
	// SignatureNotRequired: neither spec.verification nor the cluster's keys ask for one.
	SignatureNotRequired SignatureState = iota
	// SignatureVerified: every requirement is met.
	SignatureVerified
	// SignatureRefused: missing or invalid (Reason, Message say which and what to do).
	SignatureRefused
	// SignatureUnknown: the registry could not be asked (Message says why).
	SignatureUnknown
)

// Signature is the verdict on the signature of the spec's digest, made by the reconciler
// (it needs the registry) and handed to Decide.
type Signature struct {
	State   SignatureState
	Digest  string
	Reason  vocab.Reason
	Message string
}

// holds says whether the verdict keeps the spec's digest from being taken as a
// generation: it is required and not verified.
func (s Signature) holds() bool {
	return s.State == SignatureRefused || s.State == SignatureUnknown
}

// signatureReasons are the Approved reasons a verdict on the signature can leave.
var signatureReasons = map[vocab.Reason]bool{vocab.ReasonApproved: true, vocab.ReasonSignatureMissing: true, vocab.ReasonSignatureInvalid: true, vocab.ReasonSignatureUnverifiable: true}

// signatureApproval decides Approved where the signature decides it, nil where it does
// not: an unverified digest that is the one approved (a policy tightened, a signature
// taken away) or the epoch's first is not approved; a rotation to one is held and the
// current generation stays approved (a refused patch must not take down what runs).
// While the registry cannot be asked, an assigned digest keeps the approval it had.
func signatureApproval(ri *brewletv1.RuntimeImage, st brewletv1.RuntimeImageStatus, sig Signature, digest string) *metav1.Condition {
	if !sig.holds() || (st.Digest != "" && st.Digest != digest) {
		return nil
	}
	c := &metav1.Condition{Type: string(vocab.ConditionApproved), ObservedGeneration: ri.Generation}
	if sig.State == SignatureUnknown {
		if prev := meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionApproved)); prev != nil && st.Digest != "" && signatureReasons[vocab.Reason(prev.Reason)] {
			c.Status, c.Reason, c.Message = prev.Status, prev.Reason, prev.Message
			return c
		}
		c.Status, c.Reason = metav1.ConditionUnknown, string(vocab.ReasonSignatureUnverifiable)
		c.Message = fmt.Sprintf("the signature of %s could not be checked yet: %s", digest, sig.Message)
		return c
	}
	c.Status, c.Reason = metav1.ConditionFalse, string(sig.Reason)
	c.Message = fmt.Sprintf("%s is not approved: %s", digest, sig.Message)
	return c
}

// signatureCondition is SignatureVerified for the verdict; nil when none is required.
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
