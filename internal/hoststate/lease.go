package hoststate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LeaseStore is the per-container leases on generations, taken by the shim under the
// runtime lock. Its methods are promoted to Layout.
type LeaseStore struct{ Roots }

// Lease records that a container uses a generation; garbage collection keeps every leased
// generation and its layers.
type Lease struct {
	ContainerID   string    `json:"containerID"`
	ID            string    `json:"id"`
	Epoch         string    `json:"epoch"`
	Generation    int64     `json:"generation"`
	PodNamespace  string    `json:"podNamespace,omitempty"`
	PodName       string    `json:"podName,omitempty"`
	PodUID        string    `json:"podUID,omitempty"`
	ContainerName string    `json:"containerName,omitempty"`
	CreatedAt     time.Time `json:"createdAt"`
}

// withLock runs fn holding the runtime ID's lock: shared for the shim's resolve-and-lease,
// exclusive for garbage collection, so GC never removes a generation between the shim
// reading current and writing its lease. The lock file is judged first (locks.go) and the
// wait ends after RuntimeLockWait.
func (l LeaseStore) withLock(id string, how int, fn func() error) error {
	release, err := lock(context.Background(), l.LockFile(id), 0o755, how, RuntimeLockWait)
	if err != nil {
		return err
	}
	defer release()
	return fn()
}

// LeaseCurrent resolves the current generation of lease.ID and records the lease, atomically
// with respect to garbage collection. It returns the leased generation's metadata.
//
// A lease is not synced: it only means something while its container runs, and no
// container outlives the boot (RemoveTornLeases handles what a crash leaves).
//
// The lock is held only for the decision and its publication: reading current and renaming
// the lease into place. Writing the lease (for the generation current was a
// moment before) happens before the lock, and the generation's metadata is read after it,
// when the published lease already keeps that generation from garbage collection. If
// current moved in between, the lease is written again under the lock, as it always was.
func (l LeaseStore) LeaseCurrent(lease Lease) (Generation, error) {
	var g Generation
	if err := checkID(lease.ID); err != nil {
		return g, err
	}
	if err := checkContainerID(lease.ContainerID); err != nil {
		return g, err
	}
	if lease.CreatedAt.IsZero() {
		lease.CreatedAt = time.Now().UTC()
	}
	file := l.LeaseFile(lease.ContainerID)
	// A failed guess costs only the write under the lock; its error is decided there.
	guess, gerr := l.layout().Current(lease.ID)
	var tmp string
	if gerr == nil {
		lease.Epoch, lease.Generation = guess.Epoch, guess.Generation
		if b, err := marshalState(lease); err == nil {
			if tmp, err = writeTemp(file, b, stateFileMode, bootOnly); err != nil {
				tmp = ""
			}
		}
	}
	if tmp != "" {
		defer func() { _ = os.Remove(tmp) }() // gone after the rename; left by a failure
	}
	beforeLeaseLock()
	var r Ref
	err := l.withLock(lease.ID, unix.LOCK_SH, func() error {
		var err error
		if r, err = l.layout().Current(lease.ID); err != nil {
			return err
		}
		if tmp != "" && r == guess {
			return os.Rename(tmp, file)
		}
		lease.Epoch, lease.Generation = r.Epoch, r.Generation
		return writeJSONAs(file, lease, bootOnly)
	})
	if err != nil {
		return g, err
	}
	if g, err = l.layout().ReadGeneration(lease.ID, r); err != nil {
		// No lease on a generation the caller cannot use.
		_ = os.Remove(file)
		return g, err
	}
	return g, nil
}

// beforeLeaseLock lets tests move current between the lease's guess and its lock.
var beforeLeaseLock = func() {}

// ReleaseLease removes a container's lease; a missing lease is not an error.
func (l LeaseStore) ReleaseLease(containerID string) error {
	if err := checkContainerID(containerID); err != nil {
		return err
	}
	err := os.Remove(l.LeaseFile(containerID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Lease reads one container's lease.
func (l LeaseStore) Lease(containerID string) (Lease, error) {
	var ls Lease
	if err := checkContainerID(containerID); err != nil {
		return ls, err
	}
	err := readJSON(l.LeaseFile(containerID), &ls)
	if err == nil && ls.ContainerID != containerID {
		err = fmt.Errorf("lease of %s names container %q", containerID, ls.ContainerID)
	}
	return ls, err
}

// Leases lists every lease. An unreadable lease is returned as an error, never skipped:
// garbage collection must keep everything when it cannot account for a lease. With the
// error come the leases that were readable (the node report keeps them). A lease removed
// between listing and reading (its container was released meanwhile) is simply gone.
func (l LeaseStore) Leases() ([]Lease, error) {
	dir, ents, err := l.leaseEntries()
	if err != nil {
		return nil, err
	}
	var out []Lease
	var errs error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		var ls Lease
		if err := readJSON(filepath.Join(dir, e.Name()), &ls); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			errs = errors.Join(errs, fmt.Errorf("unreadable lease: %w", err))
			continue
		}
		out = append(out, ls)
	}
	return out, errs
}

// ReleaseStaleLease removes the lease of a container that containerd no longer runs (its
// shim died before releasing it), with the exclusive lock of the lease's runtime ID, so it
// never interleaves with a shim resolving and writing a lease of that ID or with garbage
// collection. It removes the lease only if the file still is the one the caller decided
// on (same container, ID and creation time), and the container's exec state with it, as
// the shim's own release does. It reports whether it removed the lease.
func (l LeaseStore) ReleaseStaleLease(seen Lease) (bool, error) {
	if err := checkContainerID(seen.ContainerID); err != nil {
		return false, err
	}
	if err := checkID(seen.ID); err != nil {
		return false, err
	}
	released := false
	release := func() error {
		var now Lease
		if err := readJSON(l.LeaseFile(seen.ContainerID), &now); errors.Is(err, fs.ErrNotExist) {
			return nil // released meanwhile
		} else if err != nil {
			return err
		}
		if now.ContainerID != seen.ContainerID || now.ID != seen.ID || !now.CreatedAt.Equal(seen.CreatedAt) {
			return nil // not the lease the caller saw: leave it
		}
		if err := os.Remove(l.LeaseFile(seen.ContainerID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		released = true
		return os.RemoveAll(l.ContainerDir(seen.ContainerID))
	}
	if _, err := os.Stat(l.RuntimeDir(seen.ID)); errors.Is(err, fs.ErrNotExist) {
		// Nothing of the ID is on the node (taking its lock would create its directory, and
		// with it a runtime ID the agent then holds): no shim can lease it without creating
		// that directory first, and a new lease would be another container's file.
		err := release()
		return released, err
	}
	err := l.withLock(seen.ID, unix.LOCK_EX, release)
	return released, err
}

// CollectUnder runs fn with the exclusive lock of a runtime ID, after which no shim can
// lease a generation fn removes.
func (l LeaseStore) CollectUnder(id string, fn func() error) error {
	if err := checkID(id); err != nil {
		return err
	}
	return l.withLock(id, unix.LOCK_EX, fn)
}

// StaleLeaseTempAge is how old a lease's temporary file must be to count as left behind: a
// shim writes one before taking the runtime's lock and renames it once it holds it, at most
// about 35 s later; a shim killed in between leaves the file.
const StaleLeaseTempAge = 10 * time.Minute

// RemoveStaleLeaseTemps removes the lease directory's temporary files last changed before
// cutoff (readers skip them; nothing else would remove them) and returns how many went.
func (l LeaseStore) RemoveStaleLeaseTemps(cutoff time.Time) (int, error) {
	dir, ents, err := l.leaseEntries()
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs error
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".tmp-") || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			continue
		}
		switch err := os.Remove(filepath.Join(dir, e.Name())); {
		case err == nil:
			removed++
		case !errors.Is(err, fs.ErrNotExist):
			errs = errors.Join(errs, err)
		}
	}
	return removed, errs
}

// leaseEntries lists the lease directory (nothing when it does not exist yet).
func (l LeaseStore) leaseEntries() (string, []os.DirEntry, error) {
	dir := filepath.Join(l.State, "leases")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return dir, nil, nil
	}
	return dir, ents, err
}
