package gc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/writer"
)

// gcNode is a node with runtime "py": generation 1 (layers base, old) and generation 2
// (layers base, new), current 2, every directory's mtime long past.
type gcNode struct {
	t         *testing.T
	l         hoststate.Layout
	c         *Collector
	now       time.Time
	base, old string
	newTop    string
	mountinfo string
}

func newGCNode(t *testing.T) *gcNode {
	t.Helper()
	dir := t.TempDir()
	n := &gcNode{t: t, l: hoststate.Under(dir), now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		base: strings.Repeat("1", 64), old: strings.Repeat("2", 64), newTop: strings.Repeat("3", 64),
		mountinfo: filepath.Join(dir, "mountinfo")}
	n.c = &Collector{Layout: n.l, Grace: time.Hour, MountInfo: n.mountinfo, Now: func() time.Time { return n.now }}
	n.mounts("")
	for _, l := range []string{n.base, n.old, n.newTop} {
		n.must(os.MkdirAll(filepath.Join(n.l.LayerDir(l), "usr"), 0o755))
	}
	for gen, top := range map[int64]string{1: n.old, 2: n.newTop} {
		n.must(n.l.WriteGeneration(hoststate.Generation{ID: "py", Epoch: "e1", Generation: gen, Digest: "sha256:x",
			Layers: []string{"sha256:" + n.base, "sha256:" + top}}))
	}
	n.must(n.l.SetCurrent("py", hoststate.Ref{Epoch: "e1", Generation: 2}))
	// Installed and written long ago: modification times say nothing about use.
	long := n.now.Add(-30 * 24 * time.Hour)
	for _, p := range []string{n.l.GenerationDir("py", "e1", 1), n.l.GenerationDir("py", "e1", 2), n.l.LayerDir(n.old)} {
		n.must(os.Chtimes(p, long, long))
	}
	return n
}

func (n *gcNode) must(err error) {
	n.t.Helper()
	if err != nil {
		n.t.Fatal(err)
	}
}

func (n *gcNode) mounts(lines string) {
	n.must(os.WriteFile(n.mountinfo, []byte("36 35 98:0 / / rw - ext4 /dev/root rw\n"+lines), 0o644))
}

func (n *gcNode) sweep() Collected {
	n.t.Helper()
	got, err := n.c.Sweep(context.Background(), nil)
	n.must(err)
	return got
}

func (n *gcNode) exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// The grace counts from the first sweep that saw a generation or layer unused, not from
// install time; a use in between restarts it.
func TestCollectorGraceCountsFromUnusedSince(t *testing.T) {
	n := newGCNode(t)
	if got := n.sweep(); len(got.Generations)+len(got.Layers) != 0 {
		t.Fatalf("first sight of an unused generation installed a month ago removed %+v", got)
	}
	u, err := n.l.ReadUnused()
	if err != nil || !u.Generations["py/e1/1"].Equal(n.now) {
		t.Fatalf("unused-since record %+v %v", u, err)
	}
	// Used again (a container leased it) and released: the grace starts over.
	n.now = n.now.Add(50 * time.Minute)
	_, err = n.l.LeaseCurrent(hoststate.Lease{ContainerID: "c1", ID: "py"}) // current is 2
	n.must(err)
	n.must(n.l.WriteAuthorization(hoststate.Authorization{ID: "py", Epoch: "e1", Generation: 2}))
	n.mounts("120 30 0:61 / /r rw - overlay overlay rw,lowerdir=brewlet/layers/" + n.old + ":brewlet/layers/" + n.base + ",upperdir=/u,workdir=/w\n")
	n.sweep()
	if u, _ := n.l.ReadUnused(); !u.Generations["py/e1/1"].IsZero() {
		t.Fatalf("a mounted generation is still recorded unused: %+v", u)
	}
	n.mounts("")
	n.now = n.now.Add(10 * time.Minute)
	if got := n.sweep(); len(got.Generations) != 0 {
		t.Fatalf("grace counted from before the last use: removed %+v", got)
	}
	n.now = n.now.Add(time.Hour)
	got := n.sweep()
	if len(got.Generations) != 1 || got.Generations[0] != "py/e1/1" || len(got.Layers) != 0 {
		t.Fatalf("after the grace: removed %+v; want generation 1 (its layer's grace starts now)", got)
	}
	n.now = n.now.Add(time.Hour)
	if got := n.sweep(); len(got.Layers) != 1 || got.Layers[0] != n.old {
		t.Fatalf("generation 1's own layer after its grace: removed %+v", got)
	}
	if !n.exists(n.l.LayerDir(n.base)) || !n.exists(n.l.GenerationDir("py", "e1", 2)) {
		t.Fatal("the current generation or the shared base layer was removed")
	}
	// Nothing changed: the record is not rewritten.
	fi, _ := os.Stat(n.l.UnusedFile())
	n.sweep()
	if fi2, _ := os.Stat(n.l.UnusedFile()); !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatal("an unchanged sweep rewrote the unused-since record")
	}
}

// A revoked runtime's current generation is collected a grace after the sweep that first
// saw it revoked and unused, however often the authorization file was written.
func TestCollectorRevokedGraceFromFirstSight(t *testing.T) {
	n := newGCNode(t)
	n.c.Grace = 0
	n.sweep() // generation 1 and its layer go
	n.c.Grace = time.Hour
	n.must(n.l.WriteAuthorization(hoststate.Authorization{ID: "py", Revoked: true, Reason: "deleted"}))
	n.sweep()
	n.now = n.now.Add(61 * time.Minute)
	n.must(n.l.WriteAuthorization(hoststate.Authorization{ID: "py", Revoked: true, Reason: "deleted"})) // a fresh mtime
	if got := n.sweep(); len(got.Generations) != 1 || got.Generations[0] != "py/e1/2" {
		t.Fatalf("revoked and unused for the grace: removed %+v", got)
	}
	if _, err := n.l.Current("py"); err == nil {
		t.Fatal("current pointer of a collected generation left")
	}
}

// Unreadable metadata keeps the generation and every layer (the ones it uses are unknown);
// an unreadable current pointer keeps every generation of the ID.
func TestCollectorKeepsWhatItCannotRead(t *testing.T) {
	n := newGCNode(t)
	n.c.Grace = 0
	meta := filepath.Join(n.l.GenerationDir("py", "e1", 1), "metadata.json")
	n.must(os.Chmod(filepath.Dir(meta), 0o755))
	n.must(os.Chmod(meta, 0o644))
	n.must(os.WriteFile(meta, []byte("{garbled"), 0o444))
	got, err := n.c.Sweep(context.Background(), nil)
	if err == nil || len(got.Generations)+len(got.Layers) != 0 || !n.exists(n.l.LayerDir(n.old)) {
		t.Fatalf("unreadable metadata: removed %+v (%v); want everything kept and an error", got, err)
	}
	// Metadata missing altogether (an install or a removal cut short) names no layer: the
	// directory goes, and the layers' fate is decided by the generations that remain.
	n.must(os.Remove(meta))
	if got := n.sweep(); len(got.Generations) != 1 || len(got.Layers) != 1 || got.Layers[0] != n.old {
		t.Fatalf("generation without metadata: removed %+v", got)
	}
	n.must(os.Remove(n.l.CurrentLink("py")))
	n.must(os.Symlink("garbage", n.l.CurrentLink("py")))
	if got := n.sweep(); len(got.Generations) != 0 {
		t.Fatalf("an unreadable current pointer let GC remove %+v", got)
	}
}

// GC skips a pass while an install holds the layer cache, stops when its context ends, and
// removes nothing once the writer lease is gone.
func TestCollectorYieldsToInstallsContextAndLease(t *testing.T) {
	n := newGCNode(t)
	n.c.Grace = 0
	unlock, err := n.l.LockLayerCache(context.Background(), false, true)
	n.must(err)
	if got := n.sweep(); len(got.Generations)+len(got.Layers) != 0 {
		t.Fatalf("GC ran during an install: %+v", got)
	}
	unlock()
	if got, err := n.c.Sweep(context.Background(), func() bool { return false }); !errors.Is(err, writer.ErrNotWriter) || len(got.Generations) != 0 {
		t.Fatalf("GC without the writer lease: %+v %v", got, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got, err := n.c.Sweep(ctx, nil); !errors.Is(err, context.Canceled) || len(got.Generations) != 0 {
		t.Fatalf("cancelled GC: %+v %v", got, err)
	}
	if got := n.sweep(); len(got.Generations) != 1 {
		t.Fatalf("GC after all that: %+v", got)
	}
}

// The newest older generation with another digest than current stays with it, unused or
// not: a rollback serves it again without fetching a byte. Older ones, and generations of
// current's digest (what a rollback made current again), go after their grace.
func TestCollectorKeepsTheRollbackTarget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		digests map[int64]string // generation -> digest; the newest is current
		kept    []int64
		removed []string
	}{
		{"after a rotation", map[int64]string{1: "sha256:a", 2: "sha256:b", 3: "sha256:c"}, []int64{2, 3}, []string{"py/e1/1"}},
		{"after a rollback", map[int64]string{1: "sha256:a", 2: "sha256:b", 3: "sha256:a"}, []int64{2, 3}, []string{"py/e1/1"}},
		{"the same digest throughout", map[int64]string{1: "sha256:a", 2: "sha256:a", 3: "sha256:a"}, []int64{3}, []string{"py/e1/1", "py/e1/2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newGCNode(t)
			for gen := int64(1); gen <= 3; gen++ {
				if dir := n.l.GenerationDir("py", "e1", gen); n.exists(dir) {
					n.must(os.Chmod(dir, 0o755))
					n.must(os.Chmod(filepath.Join(dir, "metadata.json"), 0o644))
					n.must(os.RemoveAll(dir))
				}
				n.must(n.l.WriteGeneration(hoststate.Generation{ID: "py", Epoch: "e1", Generation: gen, Digest: tc.digests[gen],
					Layers: []string{"sha256:" + n.base}}))
			}
			n.must(n.l.SetCurrent("py", hoststate.Ref{Epoch: "e1", Generation: 3}))
			n.sweep()
			n.now = n.now.Add(2 * time.Hour)
			got := n.sweep()
			if !slices.Equal(got.Generations, tc.removed) {
				t.Fatalf("removed %v, want %v", got.Generations, tc.removed)
			}
			for _, g := range tc.kept {
				if !n.exists(n.l.GenerationDir("py", "e1", g)) {
					t.Fatalf("generation %d was removed", g)
				}
			}
		})
	}
}
