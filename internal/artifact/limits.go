package artifact

import (
	"context"
	"errors"
	"fmt"

	"brewlet.sh/brewlet/internal/vocab"
)

// Bounds of one layer set (all layers validated together). Validation holds every entry in
// memory (a few hundred bytes each with the view's index), so the caps bound the
// validator's memory to a few hundred megabytes in the worst case, while real application
// and runtime layer sets stay orders of magnitude below them.
const (
	// MaxEntries caps the entries of a layer set, across layers.
	MaxEntries = 1_000_000
	// MaxPathBytes caps the bytes of entry paths and link targets of a layer set.
	MaxPathBytes = 256 << 20
)

// Limits bound the validation of one layer set, and carry the one fact of the node it
// depends on.
type Limits struct {
	Entries   int
	PathBytes int64
	// NodeLabel is the SELinux label the node's policy gives the files of containerd's
	// snapshots (read from the snapshots directory; "" where the node labels nothing). A
	// security.selinux attribute of exactly this value was written by the node, not carried
	// by the layer, and is accepted; any other value stays refused (selinux.go).
	NodeLabel string
}

// DefaultLimits are the production caps.
func DefaultLimits() Limits { return Limits{Entries: MaxEntries, PathBytes: MaxPathBytes} }

// deadlineStride is how many entries pass between two looks at the context: often enough
// to stop within milliseconds, rarely enough to cost nothing.
const deadlineStride = 1024

// Budget counts a layer set's entries and path bytes against its Limits while the layers
// are read, so a huge layer is refused before it is held in memory, and stops the work when
// the context ends. Exceeding a bound is a LimitExceeded refusal.
type Budget struct {
	ctx     context.Context
	lim     Limits
	entries int
	bytes   int64
}

// NewBudget starts counting a layer set.
func NewBudget(ctx context.Context, lim Limits) *Budget { return &Budget{ctx: ctx, lim: lim} }

// Take counts one entry read from where (a layer name).
func (b *Budget) Take(where string, e Entry) error {
	b.entries++
	b.bytes += int64(len(e.Path) + len(e.Linkname))
	switch {
	case b.entries > b.lim.Entries:
		return vocab.Errorf(vocab.ReasonLimitExceeded,
			"%s: the layer set has more than %d entries, the most a node validates; ship large trees as fewer files (for example an archive the application unpacks at start)", where, b.lim.Entries)
	case b.bytes > b.lim.PathBytes:
		return vocab.Errorf(vocab.ReasonLimitExceeded,
			"%s: the layer set's paths and link targets exceed %d bytes, the most a node validates; shorten paths or ship fewer files", where, b.lim.PathBytes)
	case b.entries%deadlineStride == 0:
		return b.Alive(where)
	}
	return nil
}

// Alive reports the end of the context (deadline or cancellation) as a refusal.
func (b *Budget) Alive(where string) error {
	err := b.ctx.Err()
	if err == nil {
		return nil
	}
	return vocab.Wrap(vocab.ReasonLimitExceeded, err,
		"validation of the layers stopped at %s after %d entries: it has a deadline so that no layer set stalls its caller; ship fewer files, or retry when the node is less busy", where, b.entries)
}

// IsDeadline reports whether a refusal is the end of the validation's time rather than a
// property of the layers: such verdicts must not be remembered.
func IsDeadline(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

func layerName(names []string, i int) string {
	if i < len(names) && names[i] != "" {
		return names[i]
	}
	return fmt.Sprintf("application layer %d", i+1)
}
