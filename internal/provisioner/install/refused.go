package install

import (
	"context"
	"errors"

	"brewlet.sh/brewlet/internal/provisioner/writer"
	"brewlet.sh/brewlet/internal/vocab"
)

// Refused reports whether an install error refuses the generation's content: final for
// that digest (the same bytes are refused again), and what a rollout counts against its
// failure budget. A pull failure, altered bytes from a source, a cancellation or the node's
// own state (a lock wait that ended, a host directory others can write: NodeNotReady), an
// untrusted registry certificate, refused credentials or a signature not (yet) attached
// say nothing about the content.
func Refused(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, writer.ErrNotWriter) {
		return false
	}
	switch vocab.ReasonOf(err) {
	case "", vocab.ReasonRuntimeImagePullFailed, vocab.ReasonDigestMismatch, vocab.ReasonNodeNotReady,
		vocab.ReasonRegistryCertificateInvalid, vocab.ReasonRegistryCredentialsRefused,
		vocab.ReasonSignatureMissing, vocab.ReasonSignatureInvalid, vocab.ReasonCredentialProviderFailed:
		return false
	}
	return true
}
