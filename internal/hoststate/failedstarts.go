package hoststate

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// FailedStarts are the containers of Brewlet runtimes that exited with an error shortly
// after they started: the shim records one when containerd deletes such a container, the
// agent reads them, reports them and removes them once old. They are how a failure of a
// container the operator did not restart (a scale-up, a rescheduled pod, a crash restart)
// reaches the rotation's health gate. Its methods are promoted to Layout.
type FailedStarts struct{ Roots }

// FailedStart is one such container: the lease it ran on (CreatedAt is its start), its
// exit code and when it exited.
type FailedStart struct {
	Lease
	ExitCode uint32    `json:"exitCode"`
	ExitedAt time.Time `json:"exitedAt"`
}

// FailedStartWindow: a container that exits with an error within this long of its create
// failed to start; one that ran longer failed for reasons of its own.
const FailedStartWindow = time.Minute

// MaxFailedStarts bounds the records on a node: a crash-looping node writes no more.
const MaxFailedStarts = 256

// FailedStartsDir holds the records (tmpfs: a reboot clears them).
func (r Roots) FailedStartsDir() string { return filepath.Join(r.Run, "failed-starts") }

// IsFailedStart says whether a container created at started that exited at exited with
// code, without anyone asking it to stop (killed), failed to start.
func IsFailedStart(code uint32, started, exited time.Time, killed bool) bool {
	return !killed && code != 0 && !started.IsZero() && !exited.Before(started) && exited.Sub(started) <= FailedStartWindow
}

// RecordFailedStart writes a record; past MaxFailedStarts records it writes none.
func (l FailedStarts) RecordFailedStart(f FailedStart) error {
	if err := checkContainerID(f.ContainerID); err != nil {
		return err
	}
	if err := checkID(f.ID); err != nil {
		return err
	}
	dir := l.FailedStartsDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) >= MaxFailedStarts {
		return nil
	}
	return writeJSONAs(filepath.Join(dir, f.ContainerID+".json"), f, bootOnly)
}

// FailedStartsKept is how long the agent reports a record (and keeps it on the node).
const FailedStartsKept = 15 * time.Minute

// ReadFailedStarts returns the records of the last keep, newest first; with prune it
// removes older and unreadable ones (nothing else reads them; only the node's writer prunes).
func (l FailedStarts) ReadFailedStarts(now time.Time, keep time.Duration, prune bool) ([]FailedStart, error) {
	dir := l.FailedStartsDir()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []FailedStart
	for i, e := range ents {
		if i >= 2*MaxFailedStarts {
			break // more than the shim writes: leftovers of another writer, not read
		}
		path := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), ".tmp-") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		var f FailedStart
		if err := readJSON(path, &f); err != nil || checkID(f.ID) != nil || now.Sub(f.ExitedAt) > keep || f.ExitedAt.After(now.Add(time.Minute)) {
			if prune {
				_ = os.Remove(path)
			}
			continue
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b FailedStart) int { return b.ExitedAt.Compare(a.ExitedAt) })
	return out, nil
}

// HasFailedStarts reports whether the records' directory exists (or cannot be told apart
// from existing).
func (l FailedStarts) HasFailedStarts() bool {
	_, err := os.Lstat(l.FailedStartsDir())
	return !errors.Is(err, fs.ErrNotExist)
}

// RemoveFailedStarts removes the records and their directory, for a node that serves
// Brewlet no more.
func (l FailedStarts) RemoveFailedStarts() error { return os.RemoveAll(l.FailedStartsDir()) }
