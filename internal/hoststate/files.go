package hoststate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// maxStateFile bounds every JSON file the shim reads: they are a few hundred bytes.
const maxStateFile = 1 << 20

// stateFileMode is the mode of every JSON state file.
const stateFileMode = 0o644

// writeJSON replaces a state file atomically.
func writeJSON(path string, v any) error { return writeJSONAs(path, v, durable) }

// writeJSONAs replaces a state file atomically, synced when d is durable.
func writeJSONAs(path string, v any, d durability) error {
	b, err := marshalState(v)
	if err != nil {
		return err
	}
	return replaceAtomic(path, b, stateFileMode, d)
}

// marshalState is the on-disk form of every JSON state file.
func marshalState(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return append(b, '\n'), err
}

// WriteFileAtomic replaces a file (temporary file, fsync, rename), so a reader sees the old
// or the new content, never a torn one. Every host file Brewlet writes goes through it but
// the leases, which skip the fsync (writeJSONAs).
func WriteFileAtomic(path string, b []byte, mode os.FileMode) error {
	return replaceAtomic(path, b, mode, durable)
}

func replaceAtomic(path string, b []byte, mode os.FileMode, d durability) error {
	tmp, err := writeTemp(path, b, mode, d)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp) }()
	return os.Rename(tmp, path)
}

// durability says whether a state file must survive a crash of the machine. Within one boot
// the rename alone makes a replace atomic (readers see the page cache, never a torn file);
// the fsync only matters for what is still read after a reboot.
type durability bool

const (
	durable  durability = true
	bootOnly durability = false // leases: docs/provisioner.md, "Leases across a reboot"
)

// writeTemp writes b to a new temporary file beside path (".tmp-<name>-*", which readers
// of a directory skip), synced when d is durable, and returns its name; renaming it over
// path is the atomic replace. It is split from WriteFileAtomic so a writer can do the
// slow part before taking a lock and only the rename under it.
func writeTemp(path string, b []byte, mode os.FileMode, d durability) (string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil && d == durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// ReplaceFile replaces a host file someone else owns (containerd's config, a drop-in)
// atomically, keeping the mode and owner it had; a new file gets mode and the agent's
// owner. An administrator's 0600 config must not become world-readable because Brewlet
// added a handler to it.
func ReplaceFile(path string, b []byte, mode os.FileMode) error {
	uid, gid := -1, -1
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	if err := WriteFileAtomic(path, b, mode); err != nil {
		return err
	}
	if uid >= 0 && (uid != os.Geteuid() || gid != os.Getegid()) {
		return os.Lchown(path, uid, gid)
	}
	return nil
}

// readJSON reads a state file strictly (unknown fields refused, size bounded).
func readJSON(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return decodeState(f, fi, path, v)
}

// decodeState decodes the state file f (stat fi, named path) into v.
func decodeState(f *os.File, fi os.FileInfo, path string, v any) error {
	if fi.Size() > maxStateFile {
		return fmt.Errorf("%s is %d bytes; state files are at most %d", path, fi.Size(), maxStateFile)
	}
	dec := json.NewDecoder(io.LimitReader(f, maxStateFile))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readBounded reads a whole file of at most max bytes; a missing file is nil. A larger one
// is an error, never a truncated read.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return b, nil
}
