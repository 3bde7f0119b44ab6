package shim

import "testing"

// Creates in a burst share one pending release, pushed back by each create.
func TestReleaseMemorySoonIsDebounced(t *testing.T) {
	releaseMemorySoon()
	release.mu.Lock()
	first := release.t
	release.mu.Unlock()
	if first == nil {
		t.Fatal("no release scheduled after a create")
	}
	releaseMemorySoon()
	release.mu.Lock()
	defer release.mu.Unlock()
	if release.t != first {
		t.Fatal("a second create scheduled another release instead of pushing the first back")
	}
}
