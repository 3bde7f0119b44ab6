package containerd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// HostChanges makes and reverses Brewlet's changes to the host outside its own
// directories: the shim binary and containerd's handler. Every change is recorded in the
// host record (hoststate.HostRecord) before it is made, with what the file held before, so
// cleanup can put back exactly those bytes, and never touches a file someone else changed
// since.
type HostChanges struct {
	Layout     hoststate.Layout
	Containerd *Handler
	// ShimSource is the shim binary in the agent's image; ShimDir the host directory
	// containerd finds shims in ("" installs none).
	ShimSource, ShimDir string
}

// Prepare installs the shim (when ShimDir is set) and, in mode validated, registers the
// handler with containerd. Mode none leaves containerd alone. Failures are reported in the
// returned record's message (containerd rolled back), for NodeRuntime status.cleanup.
func (h *HostChanges) Prepare(ctx context.Context, mode vocab.ContainerdRestart) *brewletv1.NodeCleanup {
	rep := &brewletv1.NodeCleanup{}
	var msgs []string
	rec, err := h.Layout.ReadHostRecord()
	if err != nil {
		rep.Message = "host record: " + err.Error() + "; nothing changed"
		return rep
	}
	validated := mode == vocab.ContainerdRestartValidated && h.Containerd != nil
	if validated {
		// A containerd Brewlet cannot run on is refused before the shim or the config is
		// touched.
		if _, err := h.Containerd.CheckVersion(ctx); err != nil {
			rep.Message = err.Error()
			log.Printf("host preparation: %s", rep.Message)
			return rep
		}
	}
	if h.ShimDir != "" {
		if err := h.installShim(&rec); err != nil {
			msgs = append(msgs, "shim not installed: "+err.Error())
		} else {
			rep.ShimInstalled = true
		}
	}
	if validated {
		if err := h.registerHandler(ctx, &rec); err != nil {
			msgs = append(msgs, err.Error())
		} else {
			rep.ContainerdHandlerRegistered = true
		}
	}
	rep.Message = strings.Join(msgs, "; ")
	if rep.Message != "" {
		log.Printf("host preparation: %s", rep.Message)
	}
	return rep
}

func (h *HostChanges) installShim(rec *hoststate.HostRecord) error {
	want, err := os.ReadFile(h.ShimSource)
	if err != nil {
		return err
	}
	dst := filepath.Join(h.ShimDir, vocab.ShimBinaryName)
	if rec.Shim == nil || rec.Shim.Path != dst {
		_, err := os.Lstat(dst)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		// A shim that was there before Brewlet first recorded one belongs to someone else
		// (the node image, or an agent that kept no record): cleanup leaves it, and says so
		// only if it was replaced meanwhile.
		rec.Shim = &hoststate.FileChange{Path: dst, Existed: err == nil}
		if err := h.Layout.WriteHostRecord(*rec); err != nil {
			return fmt.Errorf("record the change first: %w", err)
		}
	}
	if _, err := InstallShim(h.ShimSource, h.ShimDir); err != nil {
		return err
	}
	rec.Shim.Written = digestOf(want)
	return h.Layout.WriteHostRecord(*rec)
}

func (h *HostChanges) registerHandler(ctx context.Context, rec *hoststate.HostRecord) error {
	path, err := h.Containerd.Target()
	if err != nil {
		return err
	}
	if rec.Containerd == nil || rec.Containerd.Path != path {
		ch := &hoststate.FileChange{Path: path}
		if fi, err := os.Stat(path); err == nil {
			ch.Existed, ch.Mode = true, fi.Mode().Perm()
			if ch.Original, err = os.ReadFile(path); err != nil {
				return err
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		rec.Containerd = ch
		if err := h.Layout.WriteHostRecord(*rec); err != nil {
			return fmt.Errorf("record the change first: %w", err)
		}
	}
	change, err := h.Containerd.Ensure(ctx)
	if err != nil {
		return err
	}
	if change.Restarted {
		log.Printf("registered the brewlet handler in %s and restarted containerd", change.File)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rec.Containerd.Written = digestOf(b)
	return h.Layout.WriteHostRecord(*rec)
}

// Reverse undoes every recorded change: containerd's config gets back the bytes it had
// before Brewlet (restarting containerd only if the effective config changes), and the
// shim Brewlet installed is removed. A file someone changed after Brewlet wrote it is not
// overwritten: the handler is taken out of it and the rest kept (reported, since the file
// then differs from before). The record is cleared only when everything is reversed.
func (h *HostChanges) Reverse(ctx context.Context) (notes string, err error) {
	rec, err := h.Layout.ReadHostRecord()
	if err != nil {
		return "", err
	}
	var msgs []string
	if c := rec.Containerd; c != nil {
		note, err := h.restoreConfig(ctx, c)
		if err != nil {
			return "", vocab.Wrap(vocab.ReasonContainerdConfigFailed, err, "cleanup: restore containerd's config %s", c.Path)
		}
		if note != "" {
			msgs = append(msgs, note)
		}
		rec.Containerd = nil
		if err := h.Layout.WriteHostRecord(rec); err != nil {
			return "", err
		}
	}
	if s := rec.Shim; s != nil {
		have, err := os.ReadFile(s.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist) || s.Existed:
		case err != nil:
			return "", fmt.Errorf("cleanup: read the shim %s: %w", s.Path, err)
		case digestOf(have) != s.Written:
			msgs = append(msgs, fmt.Sprintf("the shim %s was replaced after Brewlet installed it; left in place", s.Path))
		default:
			if err := os.Remove(s.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("cleanup: remove the shim %s: %w", s.Path, err)
			}
		}
		rec.Shim = nil
		if err := h.Layout.WriteHostRecord(rec); err != nil {
			return "", err
		}
	}
	return strings.Join(msgs, "; "), nil
}

func (h *HostChanges) restoreConfig(ctx context.Context, c *hoststate.FileChange) (string, error) {
	have, err := os.ReadFile(c.Path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	switch {
	case exists == c.Existed && (!exists || bytes.Equal(have, c.Original)):
		return "", nil // as it was
	case c.Written == "" || !exists || digestOf(have) != c.Written:
		// Not Brewlet's content (an administrator edited it, or Brewlet's write never
		// happened): take the handler out, keep the rest.
		if h.Containerd == nil {
			return "", errors.New("no containerd to validate the change with")
		}
		if _, err := h.Containerd.Remove(ctx); err != nil {
			return "", err
		}
		return fmt.Sprintf("containerd's config %s was changed after Brewlet's edit: the brewlet handler was removed from it and the other changes kept", c.Path), nil
	}
	if h.Containerd == nil {
		return "", errors.New("no containerd to validate the change with")
	}
	if _, err := h.Containerd.Restore(ctx, c.Path, c.Original, c.Existed); err != nil {
		return "", err
	}
	if c.Existed && c.Mode != 0 {
		if err := os.Chmod(c.Path, c.Mode); err != nil {
			return "", err
		}
	}
	return "", nil
}

// Recorded reports whether any host change is still recorded (not reversed).
func (h *HostChanges) Recorded() (bool, error) {
	rec, err := h.Layout.ReadHostRecord()
	return !rec.Empty(), err
}

func digestOf(b []byte) string {
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:])
}
