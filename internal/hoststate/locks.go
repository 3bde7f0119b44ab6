package hoststate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/vocab"
)

// Brewlet's locks are flocks on files in its own directories. A flock needs nothing but an
// open descriptor, so whoever can open a lock file can hold it forever: a lock file
// readable by other users lets any of them stall every container create or garbage
// collection, and one in a directory they can write can be pre-created by them. So every
// lock file is judged before it is used:
//
//   - its directory, and every directory above it (judged on the real path), is owned by
//     root (or by the process itself, for tests run without root) and not writable by group
//     or others; an ancestor that is writable by others but sticky (/tmp) is accepted, since
//     nobody else can replace the entry below it, which is judged in turn;
//   - the lock file is a regular file owned by root (or the process). One with group or
//     other permission bits is repaired to 0600 (older Brewlets created 0644 files, and the
//     owner is trusted, so nothing else can have written it); one owned by anyone else is
//     refused: another user created it, which says the directory was open to them once, and
//     an administrator should look before Brewlet trusts it again.
//
// Every wait for a lock ends: flock is tried without blocking and retried until a bound,
// after which the caller gets a NodeNotReady refusal naming the lock file.

// Bounds of lock waits. A runtime ID's lock is held for the few file operations of a lease
// or of removing a generation's metadata, so a shim or collector that waits longer than
// RuntimeLockWait is behind a stuck process. The layer cache lock is held exclusively by a
// whole garbage collection sweep, which removes layer trees, so installs wait longer.
const (
	RuntimeLockWait    = 30 * time.Second
	LayerCacheLockWait = 10 * time.Minute
)

// lockPoll is how often a waiting lock retries: flock has no deadline of its own.
const lockPoll = 50 * time.Millisecond

// trustedOwner reports whether uid may own Brewlet's lock files and their directories:
// root, or the process itself (the agent and the shim run as root; tests may not).
func trustedOwner(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

// judgeLockDir refuses a directory on the way to a lock file that someone other than root
// could write. own is the lock file's own directory, where a sticky bit does not help:
// another user could still create the lock file there before Brewlet does.
func judgeLockDir(dir string, mode fs.FileMode, uid uint32, own bool) error {
	switch {
	case !mode.IsDir():
		return vocab.Errorf(vocab.ReasonNodeNotReady, "%s, on the way to a Brewlet lock file, is not a directory (%s); restore Brewlet's host directories (docs/provisioner.md, Host layout)", dir, mode.Type())
	case !trustedOwner(uid):
		return vocab.Errorf(vocab.ReasonNodeNotReady, "%s, on the way to a Brewlet lock file, is owned by uid %d; only root may own it, or another user can take Brewlet's locks: chown root %s (and check what that user put there)", dir, uid, dir)
	case mode.Perm()&0o022 != 0 && (own || mode&fs.ModeSticky == 0):
		return vocab.Errorf(vocab.ReasonNodeNotReady, "%s, on the way to a Brewlet lock file, has mode %s: writable by group or others, who could create or replace Brewlet's lock files; chmod go-w %s (and check what is in it)", dir, octalMode(mode), dir)
	}
	return nil
}

// octalMode renders permission and sticky bits as chmod takes them.
func octalMode(m fs.FileMode) string {
	v := uint32(m.Perm())
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}

// judgeLockFile decides about an opened lock file: refused, repaired (chmod 0600) or fine.
func judgeLockFile(path string, mode fs.FileMode, uid uint32) (repair bool, err error) {
	switch {
	case !mode.IsRegular():
		return false, vocab.Errorf(vocab.ReasonNodeNotReady, "lock file %s is not a regular file (%s); remove it, Brewlet creates it again", path, mode.Type())
	case !trustedOwner(uid):
		return false, vocab.Errorf(vocab.ReasonNodeNotReady, "lock file %s is owned by uid %d, not root: another user created it and could hold it forever; remove it (Brewlet creates it again) and check who could write to %s", path, uid, filepath.Dir(path))
	case mode.Perm()&0o077 != 0:
		return true, nil
	}
	return false, nil
}

// CheckPrivateDir judges dir and every directory above it as judgeLockDir does (dir as a
// lock file's own directory). Directories whose files Brewlet locks (the layer cache with
// its install workspaces) are checked with it before anything in them is opened.
func CheckPrivateDir(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	for d, own := real, true; ; d, own = filepath.Dir(d), false {
		fi, err := os.Lstat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("stat %s: no owner", d)
		}
		if err := judgeLockDir(d, fi.Mode(), st.Uid, own); err != nil {
			return err
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// openLock creates or opens a lock file, in a directory created with mode (0755 or 0700)
// if missing, after judging its directories and then the file itself.
func openLock(path string, dirMode fs.FileMode) (*os.File, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, err
	}
	if err := CheckPrivateDir(dir); err != nil {
		return nil, err
	}
	// No symlink is followed and a FIFO planted under the name cannot block the open.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, vocab.Errorf(vocab.ReasonNodeNotReady, "lock file %s is a symlink; remove it, Brewlet creates it again", path)
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		_ = f.Close()
		return nil, fmt.Errorf("stat %s: no owner", path)
	}
	repair, err := judgeLockFile(path, fi.Mode(), st.Uid)
	if err == nil && repair {
		err = f.Chmod(0o600)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// errLockBusy: the lock is held and the caller asked not to wait.
var errLockBusy = errors.New("lock held")

// flockWithin takes a flock (how: LOCK_SH or LOCK_EX), retrying until ctx ends or bound
// passes (bound 0: do not wait, errLockBusy). Hitting the bound is a NodeNotReady refusal
// naming the file and how to find its holder.
func flockWithin(ctx context.Context, f *os.File, how int, bound time.Duration) error {
	give := time.Now().Add(bound)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if bound <= 0 {
			return errLockBusy
		}
		if !time.Now().Before(give) {
			return vocab.Errorf(vocab.ReasonNodeNotReady, "waited %s for the lock %s, which another process holds (a garbage collection, an install or a stuck shim); the request is tried again later — if this persists, find the holder with fuser -v %s", bound, f.Name(), f.Name())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(lockPoll, time.Until(give))):
		}
	}
}

// lock opens path as a Brewlet lock (openLock), takes it (flockWithin) and returns its
// release: the one way every lock of the package is taken.
func lock(ctx context.Context, path string, dirMode fs.FileMode, how int, bound time.Duration) (func(), error) {
	f, err := openLock(path, dirMode)
	if err != nil {
		return nil, err
	}
	if err := flockWithin(ctx, f, how, bound); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); _ = f.Close() }, nil
}

// LockExclusive takes an exclusive lock on path (created 0600 in a root-only directory,
// judged like every Brewlet lock) and returns its release. It waits until ctx ends or bound
// has passed, then refuses with NodeNotReady naming the file. Shims use it to let one of
// them do a slow piece of work that the others would repeat (validating a layer set).
func LockExclusive(ctx context.Context, path string, bound time.Duration) (func(), error) {
	return lock(ctx, path, 0o700, unix.LOCK_EX, bound)
}

// RemoveIfUnlocked removes a lock file nobody holds (pruning). One opened but not yet
// locked by someone else may go too: that holder then locks a removed file and does its work
// alongside the next one, which costs time, never correctness.
func RemoveIfUnlocked(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil // held: in use
	}
	return os.Remove(path)
}

// ReadPrivateFile reads a file whose content the shim trusts without checking it against
// anything else (a cached verdict), judged as a lock file is: its directories by
// CheckPrivateDir, the file opened without following a symlink or blocking on a FIFO, a
// regular file owned by root (or the process) that nobody else can write. A file over
// limit bytes is refused. Any refusal is an error; callers treat it as no entry.
func ReadPrivateFile(path string, limit int64) ([]byte, error) {
	if err := CheckPrivateDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok || !fi.Mode().IsRegular() || !trustedOwner(st.Uid) || fi.Mode().Perm()&0o022 != 0:
		return nil, fmt.Errorf("%s is not a regular file that only root can write (%s)", path, fi.Mode())
	case fi.Size() > limit:
		return nil, fmt.Errorf("%s is %d bytes, over %d", path, fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s grew over %d bytes", path, limit)
	}
	return b, err
}
