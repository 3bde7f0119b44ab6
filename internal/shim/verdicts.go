package shim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

const (
	// appValidationTimeout bounds validating one layer set, so that no image stalls a
	// create (containerd and kubelet wait minutes before giving up on their own).
	appValidationTimeout = 30 * time.Second
	// maxVerdicts bounds the verdict cache; the least recently used verdicts go first.
	maxVerdicts = 4096
	// maxVerdictFile bounds a verdict file read back (a refusal message is under 1 KiB).
	maxVerdictFile = 64 << 10
	// appSlotWait bounds how long a shim waits for one of the node's validation slots
	// (validationSlots) while other layer sets are being validated.
	appSlotWait = 30 * time.Second
	// validationLockWait bounds how long a shim waits for another shim validating the same
	// layer set: a little more than that validation may take, slot wait included.
	validationLockWait = appSlotWait + appValidationTimeout + 5*time.Second
	// firstDeadlineBackoff is how long a layer set that ran out of validation time is
	// refused without being validated again; each further timeout doubles it, up to
	// maxDeadlineBackoff. Without it every replica's create spends the whole deadline.
	firstDeadlineBackoff = 30 * time.Second
	maxDeadlineBackoff   = 30 * time.Minute
	// lockSuffix names a layer set's validation lock beside its verdict.
	lockSuffix = ".lock"
)

// validateLayers, validationTimeout, slotWait and validationSlots are variables for the
// tests, which count validations, make them time out and bound them.
var (
	validateLayers    = artifact.ValidateDirLayers
	validationTimeout = appValidationTimeout
	slotWait          = appSlotWait
	// validationSlots bounds how many distinct layer sets the node's shims validate at once
	// (each walks and reads a whole application; the same set is validated once anyway):
	// a burst of pods with distinct images, or one tenant's many, queue for a slot rather
	// than taking every core and disk of the node. Half the cores, at least 2, at most 8.
	validationSlots = min(max(runtime.NumCPU()/2, 2), 8)
)

// slotsDir holds the validation slots beside the verdict cache dir (not inside it: its
// pruning removes lock files it does not know).
func slotsDir(dir string) string { return filepath.Join(filepath.Dir(dir), "validation-slots") }

// verdict is the remembered outcome of validating one layer set. A refusal for running out
// of time holds until RetryAt: Timeouts counts them, for the backoff.
type verdict struct {
	OK       bool         `json:"ok,omitempty"`
	Reason   vocab.Reason `json:"reason,omitempty"`
	Message  string       `json:"message,omitempty"`
	Timeouts int          `json:"timeouts,omitempty"`
	RetryAt  *time.Time   `json:"retryAt,omitempty"`
}

// holds reports whether a remembered verdict answers at now: always, except a timeout
// refusal whose backoff has passed.
func (v verdict) holds(now time.Time) bool { return v.RetryAt == nil || now.Before(*v.RetryAt) }

// timedOut is the verdict after a validation ran out of time, following prev (the verdict
// it replaces, if any): the backoff doubles with each timeout in a row.
func timedOut(err error, prev verdict, now time.Time) verdict {
	n := prev.Timeouts + 1
	wait := firstDeadlineBackoff << min(n-1, 10)
	wait = min(wait, maxDeadlineBackoff)
	at := now.Add(wait).UTC().Truncate(time.Second)
	msg := strings.TrimPrefix(err.Error(), string(vocab.ReasonLimitExceeded)+": ")
	return verdict{Reason: vocab.ReasonLimitExceeded, Timeouts: n, RetryAt: &at,
		Message: fmt.Sprintf("%s (validation timed out %d time(s) in a row on this node; it is tried again after %s)", msg, n, at.Format(time.RFC3339))}
}

// err returns the refusal as first reported: same reason, same text.
func (v verdict) err() error {
	if v.OK {
		return nil
	}
	return &vocab.Error{Reason: v.Reason, Message: v.Message}
}

// verdictOf says what of a validation's outcome may be remembered for good: acceptance, and
// refusals that are properties of the layers. Running out of time is not (the next try may
// be on a quieter node; timedOut remembers it for a while), nor is an I/O error.
func verdictOf(err error) (verdict, bool) {
	r := vocab.ReasonOf(err)
	switch {
	case err == nil:
		return verdict{OK: true}, true
	case r == "" || artifact.IsDeadline(err):
		return verdict{}, false
	}
	return verdict{Reason: r, Message: strings.TrimPrefix(err.Error(), string(r)+": ")}, true
}

// layerSetKey names a layer set by the identity of its directories rather than their
// paths: containerd reuses snapshot numbers (".../snapshots/<n>/fs") after its state is
// wiped, but a directory created anew has a new birth time (or, where the filesystem keeps
// none, a new change time) even when its inode number is reused. The rules version, the
// limits and the node's SELinux label are part of the key, so that other rules never answer.
func layerSetKey(dirs []string, lim artifact.Limits) (string, error) {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "brewlet layer rules v%d, %d entries, %d path bytes, node label %q\n", artifact.RulesVersion, lim.Entries, lim.PathBytes, lim.NodeLabel)
	for _, d := range dirs {
		id, err := dirIdentity(d)
		if err != nil {
			return "", err
		}
		_, _ = fmt.Fprintln(h, id)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func dirIdentity(dir string) (string, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_INO|unix.STATX_BTIME|unix.STATX_CTIME, &st); err != nil {
		return "", &fs.PathError{Op: "statx", Path: dir, Err: err}
	}
	born := fmt.Sprintf("born %d.%09d", st.Btime.Sec, st.Btime.Nsec)
	if st.Mask&unix.STATX_BTIME == 0 {
		born = fmt.Sprintf("changed %d.%09d", st.Ctime.Sec, st.Ctime.Nsec)
	}
	return fmt.Sprintf("dev %d:%d ino %d %s", st.Dev_major, st.Dev_minor, st.Ino, born), nil
}

// cachedValidation validates a layer set, or answers from the verdict cache in dir. One
// shim at a time validates a layer set on a node (its lock beside the verdict); the others
// wait and read its verdict, so twenty replicas starting at once cost one validation. At
// most validationSlots distinct sets are validated at once on the node.
func cachedValidation(ctx context.Context, dir string, layers []string, lim artifact.Limits) error {
	key, err := layerSetKey(layers, lim)
	if err != nil {
		return err
	}
	file := filepath.Join(dir, key)
	if v, ok := answer(file); ok {
		return v.err()
	}
	release, err := hoststate.LockExclusive(ctx, file+lockSuffix, validationLockWait)
	if err != nil {
		return err
	}
	defer release()
	// Validated by another shim while this one waited.
	if v, ok := answer(file); ok {
		return v.err()
	}
	// Only now, with a validation certain, is a slot taken: cached answers and shims waiting
	// for the same set hold none.
	freeSlot, err := hoststate.TakeSlot(ctx, slotsDir(dir), validationSlots, slotWait, "validating an application's layers")
	if err != nil {
		return err
	}
	defer freeSlot()
	vctx, cancel := context.WithTimeout(ctx, validationTimeout)
	defer cancel()
	err = validateLayers(vctx, layers, nil, lim)
	v, keep := verdictOf(err)
	if !keep && ctx.Err() == nil && errors.Is(vctx.Err(), context.DeadlineExceeded) && vocab.ReasonOf(err) == vocab.ReasonLimitExceeded {
		// This validation's own deadline, not the caller giving up: remembered for a while.
		prev, _ := readVerdict(file)
		v, keep = timedOut(err, prev, time.Now()), true
		err = v.err()
	}
	if keep {
		// The verdict stands whether or not it is remembered: a failed write costs only
		// another validation later.
		_ = storeVerdict(dir, file, v)
	}
	return err
}

// answer is the remembered verdict of a layer set, when there is one that holds now.
func answer(file string) (verdict, bool) {
	v, ok := readVerdict(file)
	if !ok || !v.holds(time.Now()) {
		return verdict{}, false
	}
	now := time.Now()
	_ = os.Chtimes(file, now, now) // recently used: kept longest when pruning
	return v, true
}

// readVerdict reads a remembered verdict only from a file root alone could have written (a
// pass skips validation, so a planted one must never answer).
func readVerdict(file string) (verdict, bool) {
	b, err := hoststate.ReadPrivateFile(file, maxVerdictFile)
	if err != nil {
		return verdict{}, false
	}
	return parseVerdict(bytes.NewReader(b))
}

// parseVerdict reads a verdict strictly; anything unreadable, or from another format, is
// no verdict (the layers are validated again).
func parseVerdict(r io.Reader) (verdict, bool) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var v verdict
	if err := dec.Decode(&v); err != nil || v.OK == (v.Reason != "") || (v.OK && v.Message != "") ||
		(v.RetryAt == nil) != (v.Timeouts == 0) || v.Timeouts < 0 || (v.RetryAt != nil && v.Reason != vocab.ReasonLimitExceeded) {
		return verdict{}, false
	}
	return v, true
}

func storeVerdict(dir, file string, v verdict) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := hoststate.WriteFileAtomic(file, b, 0o600); err != nil {
		return err
	}
	return pruneVerdicts(dir, maxVerdicts)
}

// pruneVerdicts keeps the keep most recently used verdicts of dir, and the validation
// locks of those (a lock in use is never removed). Below keep verdicts it only counts
// names: it runs after every new verdict, so the common case stats nothing.
func pruneVerdicts(dir string, keep int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	verdicts := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), lockSuffix) {
			verdicts++
		}
	}
	if verdicts <= keep {
		return nil
	}
	type aged struct {
		name string
		used time.Time
	}
	var all []aged
	locks := map[string]bool{}
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), lockSuffix); ok {
			locks[name] = true
		} else if fi, err := e.Info(); err == nil {
			all = append(all, aged{e.Name(), fi.ModTime()})
		}
	}
	slices.SortFunc(all, func(a, b aged) int { return a.used.Compare(b.used) })
	for _, a := range all[max(0, len(all)-keep):] {
		delete(locks, a.name) // a kept verdict keeps its lock
	}
	var errs []error
	for _, a := range all[:max(0, len(all)-keep)] {
		if err := os.Remove(filepath.Join(dir, a.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	// The pruned verdicts' locks and those whose verdict was never stored (a validation
	// cut short by I/O or a cancelled create).
	for name := range locks {
		if err := hoststate.RemoveIfUnlocked(filepath.Join(dir, name+lockSuffix)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
