package hoststate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// HostRecordStore is the record of Brewlet's changes to the host outside its own
// directories. Its methods are promoted to Layout.
type HostRecordStore struct{ Roots }

// maxHostRecord bounds the host record: it holds containerd's original config, a few KB.
const maxHostRecord = 4 << 20

// HostRecord is what Brewlet changed on the host outside its own directories: the shim
// binary and containerd's configuration. Each entry is written before its change is made
// (so a change cut short by a crash is still reversed) and the record is cleared once
// every change is reversed. It is the node's own half of the cleanup ledger.
type HostRecord struct {
	Shim       *FileChange `json:"shim,omitempty"`
	Containerd *FileChange `json:"containerd,omitempty"`
}

// Empty reports whether nothing is left to reverse.
func (r HostRecord) Empty() bool { return r.Shim == nil && r.Containerd == nil }

// FileChange is one host file Brewlet wrote: whether it existed before Brewlet first
// wrote it and, for configuration, its content then, so cleanup can put back exactly
// those bytes.
type FileChange struct {
	Path    string      `json:"path"`
	Existed bool        `json:"existed"`
	Mode    fs.FileMode `json:"mode,omitempty"`
	// Original is the content before Brewlet's first change (configuration files only).
	Original []byte `json:"original,omitempty"`
	// Written is the sha256 of what Brewlet wrote ("" until the write happened): cleanup
	// restores the original only over Brewlet's own content, never over someone else's.
	Written string `json:"written,omitempty"`
}

// HostRecordFile is where the record lives.
func (l HostRecordStore) HostRecordFile() string {
	return filepath.Join(l.State, "host", "changes.json")
}

// ReadHostRecord reads the record; a missing one is empty. An unreadable one is an error:
// the caller must not assume the host is untouched.
func (l HostRecordStore) ReadHostRecord() (HostRecord, error) {
	var r HostRecord
	b, err := readBounded(l.HostRecordFile(), maxHostRecord)
	if err != nil || b == nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("host record %s is unreadable: %w", l.HostRecordFile(), err)
	}
	return r, nil
}

// WriteHostRecord replaces the record atomically; an empty record removes the file.
func (l HostRecordStore) WriteHostRecord(r HostRecord) error {
	if r.Empty() {
		err := os.Remove(l.HostRecordFile())
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(b) > maxHostRecord {
		return fmt.Errorf("host record would be %d bytes, more than %d", len(b), maxHostRecord)
	}
	return WriteFileAtomic(l.HostRecordFile(), b, 0o600)
}

// RemoveState removes everything Brewlet keeps under the runtimes and state roots (the
// roots themselves stay: they may be mount points). Only for a node that holds nothing of
// Brewlet's any more: no generation, no lease, no host change; the revoked-authorization
// markers go with the rest (without one, the shim refuses the ID just the same).
func (l HostRecordStore) RemoveState() error {
	var errs []error
	for _, root := range []string{l.Runtimes, l.State} {
		ents, err := os.ReadDir(root)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ents {
			p := filepath.Join(root, e.Name())
			// Generation directories are read-only; none is left, but a cut-short removal
			// may have left one without its metadata.
			_ = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					_ = os.Chmod(path, 0o755)
				}
				return nil
			})
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
