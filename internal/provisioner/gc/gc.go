package gc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/writer"
	"brewlet.sh/brewlet/internal/vocab"
)

// Collector removes non-current generations and unused cached layers once they have been
// unused for a grace period, but only what it can prove unused: no lease, no mount. Any
// doubt (an unreadable lease, mount table, metadata or current pointer) keeps what it
// concerns. The grace counts from when a sweep first saw the generation or layer unused
// (hoststate.Unused), never from a modification time.
type Collector struct {
	Layout hoststate.Layout
	Grace  time.Duration
	// MountInfo is the mount table to consult; the agent reads the host's
	// (/proc/1/mountinfo with hostPID), tests their own.
	MountInfo string
	Now       func() time.Time
	// Remove deletes one generation or layer directory (nil: os.RemoveAll); tests wrap it
	// to watch removals.
	Remove func(path string) error
}

// Collected reports what a pass removed.
type Collected struct {
	Generations []string // id/epoch/generation
	Layers      []string // diff ID hex
}

// Collect runs one sweep with no cancellation and no writer check (tests, tools).
func (c *Collector) Collect() (Collected, error) { return c.Sweep(context.Background(), nil) }

// Sweep runs one pass over every runtime ID on the node. It holds the layer cache
// exclusively, so it never runs during an install (it skips the pass instead of waiting),
// stops when ctx ends, and checks isWriter (nil: always the writer) before each removal.
func (c *Collector) Sweep(ctx context.Context, isWriter func() bool) (Collected, error) {
	var out Collected
	unlock, err := c.Layout.LockLayerCache(ctx, true, false)
	if errors.Is(err, hoststate.ErrLayerCacheBusy) {
		return out, nil // an install runs: the next pass collects
	}
	if err != nil {
		return out, err
	}
	defer unlock()
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	now = now.UTC().Round(0) // as it reads back from the record
	leases, err := c.Layout.Leases()
	if err != nil {
		return out, fmt.Errorf("keeping everything: %w", err)
	}
	table, err := os.ReadFile(c.MountInfo)
	if err != nil {
		return out, fmt.Errorf("keeping everything: cannot read the mount table %s: %w", c.MountInfo, err)
	}
	s := &sweep{c: c, ctx: ctx, isWriter: isWriter, now: now, mounted: mountedNames(string(table)),
		leased: map[string]bool{}, keep: map[string]bool{}, layersKnown: true,
		next: hoststate.Unused{Generations: map[string]time.Time{}, Layers: map[string]time.Time{}}}
	// An unreadable record restarts every grace period: later, never earlier.
	s.prev, _ = c.Layout.ReadUnused()
	for _, l := range leases {
		s.leased[l.ID+"/"+l.Epoch+"/"+strconv.FormatInt(l.Generation, 10)] = true
	}
	err = s.run(&out)
	// The record is written even after an error, so what was seen unused stays counted.
	changed := !sameTimes(s.prev.Generations, s.next.Generations) || !sameTimes(s.prev.Layers, s.next.Layers)
	if changed && (isWriter == nil || isWriter()) {
		err = errors.Join(err, c.Layout.WriteUnused(s.next))
	}
	return out, err
}

// sweep is the state of one Sweep.
type sweep struct {
	c           *Collector
	ctx         context.Context
	isWriter    func() bool
	now         time.Time
	mounted     map[string]bool // layer names in the mount table
	leased      map[string]bool // id/epoch/generation
	keep        map[string]bool // layers of every generation that stays
	layersKnown bool            // false: a generation's layers are unknown, keep every layer
	prev, next  hoststate.Unused
}

func (s *sweep) run(out *Collected) error {
	ids, err := s.c.Layout.RuntimeIDs()
	if err != nil {
		return err
	}
	for _, id := range ids {
		err := s.c.Layout.CollectUnder(id, func() error {
			removed, err := s.collectID(id)
			out.Generations = append(out.Generations, removed...)
			return err
		})
		if err != nil {
			return err
		}
	}
	if !s.layersKnown {
		// Keep the record of layers as it was: their grace resumes once metadata reads.
		s.next.Layers = s.prev.Layers
		return errors.New("keeping every layer: a generation's metadata is unreadable, so the layers it uses are unknown")
	}
	layers, err := os.ReadDir(s.c.Layout.LayerDir(""))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, l := range layers {
		name := l.Name()
		if strings.Contains(name, ".tmp-") {
			continue // an install's workspace: the installer collects those of killed installs
		}
		if s.keep[name] || s.mounted[name] || !s.expired(s.prev.Layers, s.next.Layers, name) {
			continue
		}
		if err := s.remove(s.c.Layout.LayerDir(name)); err != nil {
			return err
		}
		delete(s.next.Layers, name)
		out.Layers = append(out.Layers, name)
	}
	return nil
}

// collectID removes the unused generations of one ID (under its exclusive lock) and
// records the layers of those that stay.
func (s *sweep) collectID(id string) (removed []string, err error) {
	cur, cerr := s.c.Layout.Current(id)
	// A current pointer that exists but does not read keeps every generation of the ID.
	curKnown := cerr == nil || vocab.ReasonOf(cerr) == vocab.ReasonRuntimeImageNotInstalled
	keepCurrent := cerr == nil
	// A revoked ID (no longer offered, RuntimeImage deleted or unapproved) is removed from
	// the node once unused, its current generation included; its grace counts from the
	// sweep that first saw it revoked and unused. The revoked authorization stays as the
	// fail-closed marker the shim reads.
	if auth, aerr := s.c.Layout.ReadAuthorization(id); aerr == nil && auth.Revoked {
		keepCurrent = false
	}
	refs, err := s.c.Layout.Generations(id)
	if err != nil {
		return nil, err
	}
	metas := make([]hoststate.Generation, len(refs))
	merrs := make([]error, len(refs))
	for i, ref := range refs {
		metas[i], merrs[i] = s.c.Layout.ReadGeneration(id, ref)
	}
	var fallback hoststate.Ref
	if keepCurrent {
		fallback = fallbackOf(cur, refs, metas, merrs)
	}
	for i, ref := range refs {
		if err := s.ctx.Err(); err != nil {
			return removed, err
		}
		meta, merr := metas[i], merrs[i]
		switch {
		case errors.Is(merr, fs.ErrNotExist):
			// No metadata at all: an install that died before writing it, or a removal
			// cut short. Nothing can lease it (leasing reads the metadata), and it names no
			// layer; it goes like any unused generation.
			meta.Layers = nil
		case merr != nil:
			s.layersKnown = false // keep the generation and every layer it might use
			continue
		}
		key := id + "/" + ref.String()
		if !curKnown || (keepCurrent && (cur == ref || fallback == ref)) || s.leased[key] || s.allMounted(meta.Layers) ||
			!s.expired(s.prev.Generations, s.next.Generations, key) {
			for _, l := range meta.Layers {
				s.keep[strings.TrimPrefix(l, "sha256:")] = true
			}
			continue
		}
		dir := s.c.Layout.GenerationDir(id, ref.Epoch, ref.Generation)
		_ = os.Chmod(dir, 0o755) // generation directories are read-only
		if err := s.remove(dir); err != nil {
			return removed, err
		}
		delete(s.next.Generations, key)
		if cerr == nil && cur == ref {
			_ = os.Remove(s.c.Layout.CurrentLink(id))
		}
		removed = append(removed, key)
	}
	return removed, nil
}

// fallbackOf is the generation a rollback from current would serve again, kept with it:
// the newest generation of current's epoch older than current with another digest (zero:
// none, or current's metadata unreadable). Keeping it costs the disk of its own layers and
// makes a rollback move no byte whenever it comes. metas and errs are refs' metadata.
func fallbackOf(cur hoststate.Ref, refs []hoststate.Ref, metas []hoststate.Generation, errs []error) hoststate.Ref {
	i := slices.Index(refs, cur)
	if i < 0 || errs[i] != nil {
		return hoststate.Ref{}
	}
	var best hoststate.Ref
	for j, r := range refs {
		if r.Epoch == cur.Epoch && r.Generation < cur.Generation && r.Generation > best.Generation &&
			errs[j] == nil && metas[j].Digest != metas[i].Digest {
			best = r
		}
	}
	return best
}

// expired records key as unused (since the time of the record, or now when new) and
// reports whether it has been unused for the grace period.
func (s *sweep) expired(prev, next map[string]time.Time, key string) bool {
	since, ok := prev[key]
	if !ok || since.After(s.now) { // a clock that went back restarts the grace
		since = s.now
	}
	next[key] = since
	return s.now.Sub(since) >= s.c.Grace
}

// allMounted reports whether a mount uses the generation: a container on it mounts every
// one of its layers (a layer shared with a newer generation alone does not keep it; the
// layer itself is kept by its own check).
func (s *sweep) allMounted(layers []string) bool {
	if len(layers) == 0 {
		return false
	}
	for _, l := range layers {
		if !s.mounted[strings.TrimPrefix(l, "sha256:")] {
			return false
		}
	}
	return true
}

// remove deletes one directory after checking the sweep may still write.
func (s *sweep) remove(dir string) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if s.isWriter != nil && !s.isWriter() {
		return writer.ErrNotWriter
	}
	if s.c.Remove != nil {
		return s.c.Remove(dir)
	}
	return os.RemoveAll(dir)
}

// sameTimes compares two unused-since maps (nil and empty alike): the record is written
// only when it changed, not on every pass.
func sameTimes(a, b map[string]time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !w.Equal(v) {
			return false
		}
	}
	return true
}
