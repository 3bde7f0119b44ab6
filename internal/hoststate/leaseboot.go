package hoststate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
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
	dir := filepath.Join(l.State, "leases")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
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

// BootTime is when the machine booted, by the kernel's own account (/proc/stat's btime).
func BootTime() (time.Time, error) {
	b, err := readBounded("/proc/stat", 1<<20)
	if err != nil {
		return time.Time{}, err
	}
	return parseBootTime(b)
}

// parseBootTime finds the btime line of /proc/stat.
func parseBootTime(b []byte) (time.Time, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "btime ")
		if !ok {
			continue
		}
		sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || sec <= 0 {
			return time.Time{}, fmt.Errorf("/proc/stat: btime %q is not a positive number of seconds", v)
		}
		return time.Unix(sec, 0), nil
	}
	return time.Time{}, errors.New("/proc/stat has no btime line")
}
