package agent

import (
	"testing"

	"brewlet.sh/brewlet/internal/vocab"
)

func TestStartupTaintsDue(t *testing.T) {
	const (
		ready      = vocab.StateReady
		available  = vocab.StateAvailable
		installing = vocab.StateInstalling
		failed     = vocab.StateFailed
		revoked    = vocab.StateRevoked
	)
	for _, tc := range []struct {
		name   string
		states map[string]vocab.RuntimeState
		due    bool
	}{
		{"nothing offered yet", nil, false},
		{"first install running", map[string]vocab.RuntimeState{"py": installing}, false},
		{"ready", map[string]vocab.RuntimeState{"py": ready}, true},
		{"on demand only", map[string]vocab.RuntimeState{"py": available}, true},
		{"one ready, one still installing", map[string]vocab.RuntimeState{"py": ready, "java": installing}, false},
		{"one ready, one failed", map[string]vocab.RuntimeState{"py": ready, "java": failed}, true},
		{"only failed", map[string]vocab.RuntimeState{"py": failed}, false},
		{"only revoked", map[string]vocab.RuntimeState{"py": revoked}, false},
	} {
		if got := StartupTaintsDue(tc.states); got != tc.due {
			t.Errorf("%s: StartupTaintsDue = %v, want %v", tc.name, got, tc.due)
		}
	}
}
