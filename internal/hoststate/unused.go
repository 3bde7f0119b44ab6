package hoststate

import (
	"errors"
	"io/fs"
	"path/filepath"
	"time"
)

// UnusedStore is garbage collection's record of what has been unused since when. Its
// methods are promoted to Layout.
type UnusedStore struct{ Roots }

// Unused records since when garbage collection has seen each generation ("id/epoch/gen")
// and each cached layer (diff ID hex) unused. The grace period counts from these times, not
// from a directory's modification time: an install, a copy or a rewritten authorization
// says nothing about when the last user went away.
type Unused struct {
	Generations map[string]time.Time `json:"generations,omitempty"`
	Layers      map[string]time.Time `json:"layers,omitempty"`
}

// UnusedFile is garbage collection's record of unused-since times (agent only).
func (l UnusedStore) UnusedFile() string { return filepath.Join(l.State, "gc", "unused.json") }

// ReadUnused returns the recorded unused-since times; none recorded yet is empty.
func (l UnusedStore) ReadUnused() (Unused, error) {
	var u Unused
	err := readJSON(l.UnusedFile(), &u)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return u, err
}

// WriteUnused replaces the record atomically.
func (l UnusedStore) WriteUnused(u Unused) error { return writeJSON(l.UnusedFile(), u) }
