package provisioner

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"brewlet.sh/brewlet/internal/hoststate"
)

// Collector removes non-current generations and unused cached layers after a grace
// period, but only what it can prove unused: no lease, no exec state, no mount. Any doubt
// (an unreadable lease, an unreadable mount table) keeps everything.
type Collector struct {
	Layout hoststate.Layout
	Grace  time.Duration
	// MountInfo is the mount table to consult; the agent reads the host's
	// (/proc/1/mountinfo with hostPID), tests their own.
	MountInfo string
	Now       func() time.Time
}

// Collected reports what a pass removed.
type Collected struct {
	Generations []string // id/epoch/generation
	Layers      []string // diff ID hex
}

// Collect runs one pass over every runtime ID on the node.
func (c *Collector) Collect() (Collected, error) {
	var out Collected
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	leases, err := c.Layout.Leases()
	if err != nil {
		return out, fmt.Errorf("keeping everything: %w", err)
	}
	mounts, err := os.ReadFile(c.MountInfo)
	if err != nil {
		return out, fmt.Errorf("keeping everything: cannot read the mount table %s: %w", c.MountInfo, err)
	}
	leased := map[string]bool{}
	for _, l := range leases {
		leased[l.ID+"/"+l.Epoch+"/"+strconv.FormatInt(l.Generation, 10)] = true
	}
	ids, err := c.Layout.RuntimeIDs()
	if err != nil {
		return out, err
	}
	inUse := map[string]bool{} // layers of every generation that stays
	for _, id := range ids {
		err := c.Layout.CollectUnder(id, func() error {
			removed, kept, err := c.collectID(id, leased, string(mounts), now)
			out.Generations = append(out.Generations, removed...)
			for _, l := range kept {
				inUse[l] = true
			}
			return err
		})
		if err != nil {
			return out, err
		}
	}
	layers, err := os.ReadDir(c.Layout.LayerDir(""))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return out, err
	}
	for _, l := range layers {
		dir := c.Layout.LayerDir(l.Name())
		if inUse[l.Name()] || strings.Contains(l.Name(), ".tmp-") || strings.Contains(string(mounts), dir) || !c.old(dir, now) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			return out, err
		}
		out.Layers = append(out.Layers, l.Name())
	}
	return out, nil
}

// collectID removes the unused generations of one ID (under its exclusive lock) and
// returns the layers the remaining ones use.
func (c *Collector) collectID(id string, leased map[string]bool, mounts string, now time.Time) (removed, keptLayers []string, err error) {
	cur, cerr := c.Layout.Current(id)
	keepCurrent := cerr == nil
	// A revoked ID (no longer offered, RuntimeImage deleted or unapproved) is removed from the
	// node once unused, its current generation included; the revoked authorization stays as
	// the fail-closed marker the shim reads.
	if auth, aerr := c.Layout.ReadAuthorization(id); aerr == nil && auth.Revoked && c.old(c.Layout.AuthorizationFile(id), now) {
		keepCurrent = false
	}
	refs, err := c.Layout.Generations(id)
	if err != nil {
		return nil, nil, err
	}
	for _, ref := range refs {
		meta, merr := c.Layout.ReadGeneration(id, ref)
		key := id + "/" + ref.String()
		dir := c.Layout.GenerationDir(id, ref.Epoch, ref.Generation)
		if (keepCurrent && cur == ref) || leased[key] || merr != nil || !c.old(dir, now) || c.mounted(meta, mounts) {
			if merr == nil {
				for _, l := range meta.Layers {
					keptLayers = append(keptLayers, strings.TrimPrefix(l, "sha256:"))
				}
			}
			continue
		}
		_ = os.Chmod(dir, 0o755) // generation directories are read-only
		if err := os.RemoveAll(dir); err != nil {
			return removed, keptLayers, err
		}
		if cerr == nil && cur == ref {
			_ = os.Remove(c.Layout.CurrentLink(id))
		}
		removed = append(removed, key)
	}
	return removed, keptLayers, nil
}

func (c *Collector) old(path string, now time.Time) bool {
	fi, err := os.Lstat(path)
	return err == nil && now.Sub(fi.ModTime()) >= c.Grace
}

// mounted reports whether any mount of the table uses one of the generation's layers.
func (c *Collector) mounted(g hoststate.Generation, mounts string) bool {
	sc := bufio.NewScanner(strings.NewReader(mounts))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, l := range g.Layers {
			if strings.Contains(line, c.Layout.LayerDir(strings.TrimPrefix(l, "sha256:"))) {
				return true
			}
		}
	}
	return false
}
