package hoststate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"brewlet.sh/brewlet/internal/vocab"
)

func TestAuthorizationCheck(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	valid := Authorization{ID: "python-3.12", Epoch: "uid-1", Generation: 2, ExpiresAt: now.Add(time.Minute),
		ConfirmedAt: now.Add(-4 * time.Minute), Node: "n1"}
	for _, tc := range []struct {
		name   string
		mutate func(*Authorization)
		want   vocab.Reason
	}{
		{"valid", func(*Authorization) {}, ""},
		{"revoked", func(a *Authorization) { a.Revoked, a.Reason = true, "RuntimeImage deleted" }, vocab.ReasonRuntimeImageRevoked},
		{"revoked wins over expiry", func(a *Authorization) { a.Revoked, a.ExpiresAt = true, now.Add(-time.Hour) }, vocab.ReasonRuntimeImageRevoked},
		{"expired", func(a *Authorization) { a.ExpiresAt = now.Add(-time.Second) }, vocab.ReasonRuntimeImageAuthorizationExpired},
		{"expires exactly now", func(a *Authorization) { a.ExpiresAt = now }, vocab.ReasonRuntimeImageAuthorizationExpired},
		{"zero expiry", func(a *Authorization) { a.ExpiresAt = time.Time{} }, vocab.ReasonRuntimeImageAuthorizationExpired},
		{"no generation", func(a *Authorization) { a.Generation = 0 }, vocab.ReasonRuntimeImageNotInstalled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := valid
			tc.mutate(&a)
			err := a.Check(now)
			if vocab.ReasonOf(err) != tc.want {
				t.Fatalf("Check = %v, want reason %q", err, tc.want)
			}
			if tc.want == vocab.ReasonRuntimeImageAuthorizationExpired && !strings.Contains(err.Error(), "brewlet-provisioner logs on n1") {
				t.Fatalf("message does not say what to do: %v", err)
			}
		})
	}
}

func TestGenerationsLeasesAndCurrent(t *testing.T) {
	l := Under(t.TempDir())
	id := "python-3.12"
	if _, err := l.Current(id); vocab.ReasonOf(err) != vocab.ReasonRuntimeImageNotInstalled {
		t.Fatalf("no current yet: %v", err)
	}
	if _, err := l.ReadAuthorization(id); vocab.ReasonOf(err) != vocab.ReasonRuntimeImageNotInstalled {
		t.Fatalf("no authorization yet: %v", err)
	}
	for gen := int64(1); gen <= 2; gen++ {
		g := Generation{ID: id, Epoch: "uid-1", Generation: gen, Digest: "sha256:x", UID: 10001, GID: 10001, Layers: []string{"sha256:a"}}
		if err := l.WriteGeneration(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.SetCurrent(id, Ref{"uid-1", 1}); err != nil {
		t.Fatal(err)
	}
	g, err := l.LeaseCurrent(Lease{ContainerID: "c1", ID: id, PodName: "web-1"})
	if err != nil || g.Generation != 1 {
		t.Fatalf("lease on generation 1: %v %+v", err, g)
	}
	if err := l.SetCurrent(id, Ref{"uid-1", 2}); err != nil {
		t.Fatal(err)
	}
	if g, err = l.LeaseCurrent(Lease{ContainerID: "c2", ID: id}); err != nil || g.Generation != 2 {
		t.Fatalf("lease on generation 2: %v %+v", err, g)
	}
	ls, err := l.Leases()
	if err != nil || len(ls) != 2 {
		t.Fatalf("leases: %v %+v", err, ls)
	}
	// A corrupt lease makes Leases fail: GC must not guess.
	if err := os.WriteFile(filepath.Join(l.State, "leases", "bad.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ls, err := l.Leases(); err == nil || len(ls) != 2 {
		t.Fatalf("corrupt lease ignored, or the readable ones dropped: %v %+v", err, ls)
	}
	// A stale lease is released only as it was seen: a rewritten one stays.
	seen := ls[0]
	if seen.ContainerID != "c1" {
		t.Fatalf("leases out of order: %+v", ls)
	}
	changed := seen
	changed.CreatedAt = seen.CreatedAt.Add(-time.Second)
	if ok, err := l.ReleaseStaleLease(changed); ok || err != nil {
		t.Fatalf("released a lease other than the one seen: %v %v", ok, err)
	}
	if err := os.MkdirAll(l.ContainerDir("c1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.ReleaseStaleLease(seen); !ok || err != nil {
		t.Fatalf("stale lease not released: %v %v", ok, err)
	}
	if _, err := os.Stat(l.ContainerDir("c1")); !os.IsNotExist(err) {
		t.Fatalf("exec state of a released lease kept: %v", err)
	}
	if ok, err := l.ReleaseStaleLease(seen); ok || err != nil {
		t.Fatalf("second release: %v %v", ok, err)
	}
	if err := l.ReleaseLease("c1"); err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseLease("c1"); err != nil {
		t.Fatalf("double release: %v", err)
	}
	for _, bad := range []string{"../x", "", "a/b", ".."} {
		if _, err := l.LeaseCurrent(Lease{ContainerID: bad, ID: id}); err == nil {
			t.Errorf("container ID %q accepted", bad)
		}
	}
	if _, err := l.LeaseCurrent(Lease{ContainerID: "c3", ID: "../../etc"}); vocab.ReasonOf(err) != vocab.ReasonInvalidRuntimeImageID {
		t.Errorf("hostile runtime ID: %v", err)
	}
}

// Garbage collection holding the exclusive lock blocks a concurrent lease until it is done.
func TestCollectUnderExcludesLeasing(t *testing.T) {
	l, id := busyboxInstalled(t)
	var mu sync.Mutex
	var order []string
	inGC := make(chan struct{})
	done := make(chan struct{})
	go func() {
		_ = l.CollectUnder(id, func() error {
			close(inGC)
			time.Sleep(200 * time.Millisecond)
			mu.Lock()
			order = append(order, "gc")
			mu.Unlock()
			return nil
		})
		close(done)
	}()
	<-inGC
	if _, err := l.LeaseCurrent(Lease{ContainerID: "c1", ID: id}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	order = append(order, "lease")
	mu.Unlock()
	<-done
	if strings.Join(order, ",") != "gc,lease" {
		t.Fatalf("lease did not wait for GC: %v", order)
	}
}

func TestFence(t *testing.T) {
	l := Under(t.TempDir())
	if vocab.ReasonOf(l.CheckFence()) != vocab.ReasonNodeNotReady {
		t.Fatal("a node never validated since boot must be fenced")
	}
	if err := l.OpenFence(); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckFence(); err != nil {
		t.Fatal(err)
	}
	if err := l.CloseFence(); err != nil {
		t.Fatal(err)
	}
	if vocab.ReasonOf(l.CheckFence()) != vocab.ReasonNodeNotReady {
		t.Fatal("closed fence let containers start")
	}
}

func FuzzCurrentPointer(f *testing.F) {
	f.Add("uid-1/2")
	f.Add("../../etc/1")
	f.Add("x/0")
	f.Fuzz(func(t *testing.T, target string) {
		l := Under(t.TempDir())
		if err := os.MkdirAll(l.RuntimeDir("rt"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, l.CurrentLink("rt")); err != nil {
			return
		}
		r, err := l.Current("rt")
		if err == nil && (r.Generation < 1 || checkEpoch(r.Epoch) != nil) {
			t.Fatalf("accepted %q as %+v", target, r)
		}
	})
}

// The lease is prepared before the lock on a guess of current; whatever happens between
// the guess and the lock, the lease names the generation current was under the lock, and
// nothing is left behind.
func TestLeaseCurrentGuess(t *testing.T) {
	const id = "python-3.12"
	for _, tc := range []struct {
		name    string
		current int64          // current before the guess (0: none)
		between func(l Layout) // runs between the guess and the lock
		want    int64          // generation leased (0: none)
		reason  vocab.Reason   // refusal expected
	}{
		{"current unchanged", 1, func(Layout) {}, 1, ""},
		{"current moved", 1, func(l Layout) { _ = l.SetCurrent(id, Ref{"uid-1", 2}) }, 2, ""},
		{"installed meanwhile", 0, func(l Layout) { _ = l.SetCurrent(id, Ref{"uid-1", 2}) }, 2, ""},
		{"current removed", 1, func(l Layout) { _ = os.Remove(l.CurrentLink(id)) }, 0, vocab.ReasonRuntimeImageNotInstalled},
		{"metadata unreadable", 3, func(Layout) {}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Under(t.TempDir())
			for gen := int64(1); gen <= 2; gen++ {
				if err := l.WriteGeneration(Generation{ID: id, Epoch: "uid-1", Generation: gen, Layers: []string{"sha256:a"}}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.current > 0 {
				if err := l.SetCurrent(id, Ref{"uid-1", tc.current}); err != nil {
					t.Fatal(err)
				}
			}
			beforeLeaseLock = func() { tc.between(l) }
			defer func() { beforeLeaseLock = func() {} }()
			g, err := l.LeaseCurrent(Lease{ContainerID: "c1", ID: id})
			ls, lerr := l.Leases()
			if lerr != nil {
				t.Fatal(lerr)
			}
			switch {
			case tc.want == 0 && (err == nil || vocab.ReasonOf(err) != tc.reason || len(ls) != 0):
				t.Fatalf("want a refusal %q and no lease: %v %+v", tc.reason, err, ls)
			case tc.want > 0 && (err != nil || g.Generation != tc.want || len(ls) != 1 || ls[0].Generation != tc.want):
				t.Fatalf("want generation %d leased: %v %+v %+v", tc.want, err, g, ls)
			}
			ents, _ := os.ReadDir(filepath.Join(l.State, "leases"))
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".tmp-") {
					t.Fatalf("temporary lease left: %s", e.Name())
				}
			}
		})
	}
}

// While garbage collection holds the runtime's lock, a lease waiting for it has already
// written and synced its file: only the rename is left for the lock.
func TestLeasePreparedBeforeLock(t *testing.T) {
	l, id := busyboxInstalled(t)
	inGC, done := make(chan struct{}), make(chan error)
	go func() {
		done <- l.CollectUnder(id, func() error {
			close(inGC)
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				ents, _ := os.ReadDir(filepath.Join(l.State, "leases"))
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), ".tmp-c1.json-") {
						if ls, err := l.Leases(); err != nil || len(ls) != 0 {
							return fmt.Errorf("lease published under GC's lock: %v %+v", err, ls)
						}
						return nil
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			return errors.New("the lease was not prepared while GC held the lock")
		})
	}()
	<-inGC
	if _, err := l.LeaseCurrent(Lease{ContainerID: "c1", ID: id}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkLeaseCurrentParallel is twenty creates leasing at once while a collector tries
// to take the exclusive lock between them.
func BenchmarkLeaseCurrentParallel(b *testing.B) {
	l, id := busyboxInstalled(b)
	stop := make(chan struct{})
	var gcs, waited atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			_ = l.CollectUnder(id, func() error { return nil })
			waited.Add(int64(time.Since(t0)))
			gcs.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	var n atomic.Int64
	b.SetParallelism(10)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c := fmt.Sprintf("c%d", n.Add(1))
			if _, err := l.LeaseCurrent(Lease{ContainerID: c, ID: id}); err != nil {
				b.Error(err)
			}
			_ = l.ReleaseLease(c)
		}
	})
	close(stop)
	// Shared holders that overlap without a gap starve the collector's polled exclusive
	// lock: gc-locks is how often it got in at all.
	b.ReportMetric(float64(gcs.Load()), "gc-locks")
	if g := gcs.Load(); g > 0 {
		b.ReportMetric(float64(waited.Load())/float64(g)/1e6, "ms/gc-lock")
	}
}

func TestRemoveStaleLeaseTemps(t *testing.T) {
	l := Under(t.TempDir())
	dir := filepath.Join(l.State, "leases")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	files := map[string]bool{ // name -> expected to remain
		".tmp-c1.json-1": false, // left by a killed shim an hour ago
		".tmp-c2.json-2": true,  // a create in flight
		"c3.json":        true,  // a lease, however old
	}
	for name := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		if name != ".tmp-c2.json-2" {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	n, err := l.RemoveStaleLeaseTemps(time.Now().Add(-StaleLeaseTempAge))
	if err != nil || n != 1 {
		t.Fatalf("removed %d (%v), want 1", n, err)
	}
	for name, remain := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != remain {
			t.Errorf("%s: present=%v, want %v", name, err == nil, remain)
		}
	}
}

// busyboxInstalled is a fresh layout whose runtime "busybox" has generation 1 current.
func busyboxInstalled(tb testing.TB) (Layout, string) {
	tb.Helper()
	l, id := Under(tb.TempDir()), "busybox"
	if err := l.WriteGeneration(Generation{ID: id, Epoch: "e", Generation: 1, Layers: []string{"sha256:a"}}); err != nil {
		tb.Fatal(err)
	}
	if err := l.SetCurrent(id, Ref{"e", 1}); err != nil {
		tb.Fatal(err)
	}
	return l, id
}
