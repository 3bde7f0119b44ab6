package hoststate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// RemoveTornLeases removes the lease files a crash of the machine left unreadable: a lease
// is renamed into place without an fsync (LeaseCurrent), so after a power loss its name can
// be on disk without its content. Within a boot a lease file is only ever replaced whole, so
// an unreadable one is removed only if it was last changed before bootTime: then no
// container of it can still run, and leaving it would keep Leases reporting an error, which
// holds garbage collection and the node report forever. A readable lease of an earlier boot
// needs nothing here: containerd has no task for it, and the task reconcile releases it.
// With each lease goes the container's saved exec state, as a release removes it. It
// returns how many went.
func (l LeaseStore) RemoveTornLeases(bootTime time.Time) (int, error) {
	dir, ents, err := l.leaseEntries()
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs error
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(e.Name(), ".tmp-") || checkContainerID(id) != nil {
			continue
		}
		file := filepath.Join(dir, e.Name())
		torn, err := tornBefore(file, bootTime)
		if err != nil || !torn {
			errs = errors.Join(errs, err)
			continue
		}
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = errors.Join(errs, err)
			continue
		}
		removed++
		errs = errors.Join(errs, os.RemoveAll(l.ContainerDir(id)))
	}
	return removed, errs
}

// tornBefore reports whether file is a regular file last changed before bootTime whose
// content is not a lease.
func tornBefore(file string, bootTime time.Time) (bool, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || !fi.ModTime().Before(bootTime) {
		return false, err
	}
	var ls Lease
	return decodeState(f, fi, file, &ls) != nil, nil
}

// BootTime is when the machine booted, by the kernel's own account: now less the uptime
// (whole seconds, like /proc/stat's btime).
func BootTime() (time.Time, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return time.Time{}, fmt.Errorf("sysinfo: %w", err)
	}
	return time.Now().Add(-time.Duration(si.Uptime) * time.Second), nil
}
