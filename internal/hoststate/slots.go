package hoststate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/vocab"
)

// ErrSlotsBusy is the refusal of TakeSlot when every slot stayed held for the whole wait
// (its reason is LimitExceeded; errors.Is matches it).
var ErrSlotsBusy = errors.New("every slot is held")

// TakeSlot takes one of n node-wide slots in dir (lock files slot-0.lock … slot-<n-1>.lock,
// judged like every Brewlet lock), so that at most n processes on the node do a piece of
// work at once, whichever process they are. It waits until ctx ends or bound has passed,
// then refuses with LimitExceeded saying what (what) is bounded and how many slots there
// are. A process that dies releases its slot with its file descriptors.
func TakeSlot(ctx context.Context, dir string, n int, bound time.Duration, what string) (func(), error) {
	if n < 1 {
		return nil, fmt.Errorf("%s: %d slots: at least one is needed", what, n)
	}
	files := make([]*os.File, 0, n)
	closeAll := func(keep *os.File) {
		for _, f := range files {
			if f != keep {
				_ = f.Close()
			}
		}
	}
	for i := range n {
		f, err := openLock(filepath.Join(dir, fmt.Sprintf("slot-%d.lock", i)), 0o700)
		if err != nil {
			closeAll(nil)
			return nil, err
		}
		files = append(files, f)
	}
	give := time.Now().Add(bound)
	for {
		for _, f := range files {
			err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if err == nil {
				closeAll(f)
				return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); _ = f.Close() }, nil
			}
			if !errors.Is(err, unix.EWOULDBLOCK) {
				closeAll(nil)
				return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
			}
		}
		if !time.Now().Before(give) {
			closeAll(nil)
			return nil, &vocab.Error{Reason: vocab.ReasonLimitExceeded, Err: ErrSlotsBusy,
				Message: fmt.Sprintf("%s: all %d of this node's slots (%s) stayed busy for %s; the request is tried again later — if this persists, the node is running too many at once (fuser -v %s/slot-*.lock names the holders)", what, n, dir, bound, dir)}
		}
		select {
		case <-ctx.Done():
			closeAll(nil)
			return nil, ctx.Err()
		case <-time.After(min(lockPoll, time.Until(give))):
		}
	}
}
