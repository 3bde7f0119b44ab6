package install

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"brewlet.sh/brewlet/internal/provisioner/writer"
	"brewlet.sh/brewlet/internal/vocab"
)

// Refused: only a refusal of the content counts against a rollout's failure budget; a
// registry outage or a cancelled install must not halt a rotation.
func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{vocab.Errorf(vocab.ReasonRuntimeImagePullFailed, "registry down"), false},
		{vocab.Errorf(vocab.ReasonDigestMismatch, "mirror"), false},
		{fmt.Errorf("install: %w", context.Canceled), false},
		{writer.ErrNotWriter, false},
		{errors.New("no space left"), false},
		{fmt.Errorf("install: %w", vocab.Errorf(vocab.ReasonNodeNotReady, "waited 10m0s for the lock")), false},
		{vocab.Errorf(vocab.ReasonRegistryCertificateInvalid, "unknown authority"), false},
		{vocab.Errorf(vocab.ReasonRegistryCredentialsRefused, "401"), false},
		{vocab.Errorf(vocab.ReasonPrivilegedRuntimeFile, "setuid"), true},
		{fmt.Errorf("layer 2: %w", vocab.Errorf(vocab.ReasonLimitExceeded, "bomb")), true},
		{vocab.Errorf(vocab.ReasonInvalidRuntimePath, "PATH"), true},
	} {
		if got := Refused(tc.err); got != tc.want {
			t.Errorf("Refused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
