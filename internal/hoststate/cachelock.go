package hoststate

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// CacheLock is the lock between layer-cache writers (installs) and garbage collection. Its
// methods are promoted to Layout.
type CacheLock struct{ Roots }

// LayerCacheLock is held shared by every install (from the first look at the cache, which
// decides what to reuse, to the generation's metadata write that makes the reuse visible)
// and exclusive by garbage collection: a layer an install is about to reuse can never be
// collected under it, and GC never sees a generation half written. It is a flock, so it
// holds between the goroutines of one agent and between the old and new agent of a
// rolling update alike.
func (l CacheLock) LayerCacheLock() string { return filepath.Join(l.State, ".layers.lock") }

// LockLayerCache takes the layer cache lock (exclusive for GC, shared for installs) and
// returns its release. It waits until ctx ends or LayerCacheLockWait has passed (then a
// NodeNotReady refusal naming the lock file); with wait false it fails at once with
// ErrLayerCacheBusy when the lock is taken (GC skips a pass rather than queue behind an
// install). The lock file is judged like every Brewlet lock (locks.go).
func (l CacheLock) LockLayerCache(ctx context.Context, exclusive, wait bool) (func(), error) {
	return l.lockLayerCache(ctx, exclusive, wait, LayerCacheLockWait)
}

func (l CacheLock) lockLayerCache(ctx context.Context, exclusive, wait bool, bound time.Duration) (func(), error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if !wait {
		bound = 0
	}
	release, err := lock(ctx, l.LayerCacheLock(), 0o755, how, bound)
	if errors.Is(err, errLockBusy) {
		return nil, ErrLayerCacheBusy
	}
	return release, err
}

// ErrLayerCacheBusy: an install holds the layer cache (LockLayerCache without waiting).
var ErrLayerCacheBusy = errors.New("the layer cache is in use by an install")
