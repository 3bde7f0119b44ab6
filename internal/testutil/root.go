// Package testutil holds what the unit tests of several packages share.
package testutil

import (
	"os"
	"testing"
)

// RequireRoot ends a test that needs root: a failure under CI=true (CI runs as root, so a
// skipped test there would hide a missing proof), a skip elsewhere. why names what needs it.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI must run as root: %s", why)
		}
		t.Skipf("needs root (%s)", why)
	}
}
