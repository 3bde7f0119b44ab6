package agent

import (
	"time"

	"brewlet.sh/brewlet/internal/vocab"
)

// MaxAuthTTL caps an authorization's lifetime: a node cut off from the API
// server stops starting containers within five minutes, whatever it was configured with.
const MaxAuthTTL = 5 * time.Minute

// ValidateTiming refuses an authorization TTL outside (0, MaxAuthTTL] and a period that
// would not renew at least twice per TTL (period 0 means TTL/5).
func ValidateTiming(ttl, period time.Duration) error {
	switch {
	case ttl <= 0 || ttl > MaxAuthTTL:
		return vocab.Errorf(vocab.ReasonLimitExceeded,
			"--authorization-ttl (provisioner.authorizationTTL) is %s; it must be above 0 and at most %s, so a disconnected node stops starting containers in time: set a value up to %s", ttl, MaxAuthTTL, MaxAuthTTL)
	case period < 0 || period > ttl/2:
		return vocab.Errorf(vocab.ReasonLimitExceeded,
			"--period is %s with --authorization-ttl %s; a pass must run at least twice per TTL or authorizations lapse between renewals: set --period at most %s, or 0 for TTL/5", period, ttl, ttl/2)
	}
	return nil
}
