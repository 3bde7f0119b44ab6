package hoststate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// LayerCacheLock is held shared by every install (from the first look at the cache, which
// decides what to reuse, to the generation's metadata write that makes the reuse visible)
// and exclusive by garbage collection: a layer an install is about to reuse can never be
// collected under it, and GC never sees a generation half written. It is a flock, so it
// holds between the goroutines of one agent and between the old and new agent of a
// rolling update alike.
func (l Layout) LayerCacheLock() string { return filepath.Join(l.State, ".layers.lock") }

// lockPoll is how often a waiting LockLayerCache retries: flock has no deadline of its own.
const lockPoll = 50 * time.Millisecond

// LockLayerCache takes the layer cache lock (exclusive for GC, shared for installs) and
// returns its release. It waits until ctx ends; with wait false it fails at once with
// ErrLayerCacheBusy when the lock is taken (GC skips a pass rather than queue behind an
// install).
func (l Layout) LockLayerCache(ctx context.Context, exclusive, wait bool) (func(), error) {
	if err := os.MkdirAll(l.State, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(l.LayerCacheLock(), os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); _ = f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", l.LayerCacheLock(), err)
		}
		if !wait {
			_ = f.Close()
			return nil, ErrLayerCacheBusy
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// ErrLayerCacheBusy: an install holds the layer cache (LockLayerCache without waiting).
var ErrLayerCacheBusy = errors.New("the layer cache is in use by an install")
