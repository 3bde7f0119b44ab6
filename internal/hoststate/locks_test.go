package hoststate

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/testutil"
	"brewlet.sh/brewlet/internal/vocab"
)

func TestJudgeLockDir(t *testing.T) {
	other := uint32(os.Geteuid() + 4242)
	if os.Geteuid() == 0 {
		other = 4242
	}
	for _, tc := range []struct {
		name string
		mode fs.FileMode
		uid  uint32
		own  bool
		want string // "" = accepted; else a piece of the message
	}{
		{"root 0755", fs.ModeDir | 0o755, 0, true, ""},
		{"root 0700", fs.ModeDir | 0o700, 0, true, ""},
		{"root 0755 ancestor", fs.ModeDir | 0o755, 0, false, ""},
		{"world-writable own directory", fs.ModeDir | 0o777, 0, true, "mode 0777"},
		{"group-writable own directory", fs.ModeDir | 0o775, 0, true, "mode 0775"},
		{"sticky world-writable own directory", fs.ModeDir | fs.ModeSticky | 0o777, 0, true, "mode 1777"},
		{"sticky world-writable ancestor (/tmp)", fs.ModeDir | fs.ModeSticky | 0o777, 0, false, ""},
		{"world-writable ancestor", fs.ModeDir | 0o777, 0, false, "chmod go-w"},
		{"owned by another user", fs.ModeDir | 0o755, other, true, "owned by uid"},
		{"ancestor owned by another user", fs.ModeDir | 0o755, other, false, "chown root"},
		{"not a directory", 0o644, 0, true, "not a directory"},
	} {
		err := judgeLockDir("/d", tc.mode, tc.uid, tc.own)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.name, err)
			}
			continue
		}
		if vocab.ReasonOf(err) != vocab.ReasonNodeNotReady || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "/d") {
			t.Errorf("%s: got %v; want NodeNotReady naming /d and %q", tc.name, err, tc.want)
		}
	}
}

func TestJudgeLockFile(t *testing.T) {
	other := uint32(4242)
	for _, tc := range []struct {
		name   string
		mode   fs.FileMode
		uid    uint32
		repair bool
		want   string
	}{
		{"root 0600", 0o600, 0, false, ""},
		{"root 0400", 0o400, 0, false, ""},
		{"root 0644 (older Brewlet)", 0o644, 0, true, ""},
		{"root 0666", 0o666, 0, true, ""},
		{"owned by another user", 0o600, other, false, "owned by uid 4242"},
		{"directory", fs.ModeDir | 0o700, 0, false, "not a regular file"},
		{"FIFO", fs.ModeNamedPipe | 0o600, 0, false, "not a regular file"},
	} {
		repair, err := judgeLockFile("/d/.lock", tc.mode, tc.uid)
		if repair != tc.repair {
			t.Errorf("%s: repair %v, want %v", tc.name, repair, tc.repair)
		}
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.name, err)
			}
			continue
		}
		if vocab.ReasonOf(err) != vocab.ReasonNodeNotReady || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "/d/.lock") {
			t.Errorf("%s: got %v; want NodeNotReady naming the file and %q", tc.name, err, tc.want)
		}
	}
}

// On disk: a fresh lock is 0600, an older Brewlet's 0644 lock is repaired, and a lock file
// or directory another user could have made is refused before anything is locked.
func TestRuntimeLockFiles(t *testing.T) {
	testutil.RequireRoot(t, "the test makes files owned by another user")
	ran := func(l Layout) error { return l.CollectUnder("rt", func() error { return nil }) }
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, l Layout)
		want    string // "" = the lock works and ends 0600 root-owned
	}{
		{"fresh", func(*testing.T, Layout) {}, ""},
		{"0644 from an older Brewlet", func(t *testing.T, l Layout) { must(t, os.WriteFile(l.LockFile("rt"), nil, 0o644)) }, ""},
		{"owned by another user", func(t *testing.T, l Layout) {
			must(t, os.WriteFile(l.LockFile("rt"), nil, 0o600))
			must(t, os.Chown(l.LockFile("rt"), 4242, 4242))
		}, "owned by uid 4242"},
		{"a symlink", func(t *testing.T, l Layout) { must(t, os.Symlink("/etc/passwd", l.LockFile("rt"))) }, "symlink"},
		{"a FIFO", func(t *testing.T, l Layout) { must(t, unix.Mkfifo(l.LockFile("rt"), 0o600)) }, "not a regular file"},
		{"world-writable runtime directory", func(t *testing.T, l Layout) { must(t, os.Chmod(l.RuntimeDir("rt"), 0o777)) }, "chmod go-w"},
		{"runtime directory owned by another user", func(t *testing.T, l Layout) { must(t, os.Chown(l.RuntimeDir("rt"), 4242, 4242)) }, "chown root"},
		{"world-writable runtimes root", func(t *testing.T, l Layout) { must(t, os.Chmod(l.Runtimes, 0o777)) }, "chmod go-w " + "RUNTIMES"},
		{"sticky world-writable runtimes root", func(t *testing.T, l Layout) { must(t, os.Chmod(l.Runtimes, 0o777|fs.ModeSticky)) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Under(t.TempDir())
			must(t, os.MkdirAll(l.RuntimeDir("rt"), 0o755))
			tc.prepare(t, l)
			err := ran(l)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				fi, err := os.Lstat(l.LockFile("rt"))
				if err != nil || fi.Mode() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
					t.Fatalf("lock file %v %v; want 0600 owned by root", fi.Mode(), err)
				}
				return
			}
			want := strings.ReplaceAll(tc.want, "RUNTIMES", l.Runtimes)
			if vocab.ReasonOf(err) != vocab.ReasonNodeNotReady || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v; want NodeNotReady mentioning %q", err, want)
			}
		})
	}
}

// Every wait for a lock ends: at its bound with a refusal naming the file, or with its
// context.
func TestLockWaitsEnd(t *testing.T) {
	l := Under(t.TempDir())
	must(t, os.MkdirAll(l.RuntimeDir("rt"), 0o755))
	holder, err := openLock(l.LockFile("rt"), 0o755)
	must(t, err)
	defer func() { _ = holder.Close() }()
	must(t, unix.Flock(int(holder.Fd()), unix.LOCK_EX))

	f, err := openLock(l.LockFile("rt"), 0o755)
	must(t, err)
	defer func() { _ = f.Close() }()
	for _, tc := range []struct {
		name  string
		how   int
		bound time.Duration
		ctx   time.Duration // 0: none
		want  func(error) bool
	}{
		{"shared, bounded", unix.LOCK_SH, 150 * time.Millisecond, 0, func(err error) bool {
			return vocab.ReasonOf(err) == vocab.ReasonNodeNotReady && strings.Contains(err.Error(), l.LockFile("rt")) && strings.Contains(err.Error(), "fuser")
		}},
		{"exclusive, bounded", unix.LOCK_EX, 150 * time.Millisecond, 0, func(err error) bool { return vocab.ReasonOf(err) == vocab.ReasonNodeNotReady }},
		{"no wait", unix.LOCK_EX, 0, 0, func(err error) bool { return errors.Is(err, errLockBusy) }},
		{"context first", unix.LOCK_EX, time.Hour, 100 * time.Millisecond, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
	} {
		ctx := context.Background()
		if tc.ctx > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, tc.ctx)
			defer cancel()
		}
		start := time.Now()
		err := flockWithin(ctx, f, tc.how, tc.bound)
		if took := time.Since(start); took > tc.bound+tc.ctx+2*time.Second && tc.ctx == 0 {
			t.Errorf("%s: waited %s", tc.name, took)
		}
		if !tc.want(err) {
			t.Errorf("%s: got %v", tc.name, err)
		}
	}
	// The layer cache lock's wait ends too, and a released lock is taken at once.
	gc, err := l.LockLayerCache(context.Background(), true, false)
	must(t, err)
	if _, err := l.lockLayerCache(context.Background(), false, true, 100*time.Millisecond); vocab.ReasonOf(err) != vocab.ReasonNodeNotReady || !strings.Contains(err.Error(), l.LayerCacheLock()) {
		t.Fatalf("install waiting behind GC: %v", err)
	}
	gc()
	must(t, unix.Flock(int(holder.Fd()), unix.LOCK_UN))
	must(t, flockWithin(context.Background(), f, unix.LOCK_SH, time.Second))
}

// The layer cache's directory (install workspaces and their owner locks) is judged like a
// lock file's.
func TestCheckPrivateDir(t *testing.T) {
	d := filepath.Join(t.TempDir(), "layers")
	must(t, os.Mkdir(d, 0o700))
	must(t, CheckPrivateDir(d))
	must(t, os.Chmod(d, 0o733))
	if err := CheckPrivateDir(d); vocab.ReasonOf(err) != vocab.ReasonNodeNotReady || !strings.Contains(err.Error(), d) {
		t.Fatalf("group/other-writable layer cache: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(d, link))
	if err := CheckPrivateDir(link); vocab.ReasonOf(err) != vocab.ReasonNodeNotReady || !strings.Contains(err.Error(), d) {
		t.Fatalf("judged on the real path: %v", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A trusted cache entry is read only from a file nobody but root can have written.
func TestReadPrivateFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir, file string)
		ok    bool
	}{
		{"root's file", func(*testing.T, string, string) {}, true},
		{"group-writable file", func(t *testing.T, _, f string) { must(t, os.Chmod(f, 0o664)) }, false},
		{"file in a directory others write", func(t *testing.T, d, _ string) { must(t, os.Chmod(d, 0o777)) }, false},
		{"symlink", func(t *testing.T, d, f string) {
			must(t, os.Rename(f, f+".real"))
			must(t, os.Symlink(f+".real", f))
		}, false},
		{"fifo", func(t *testing.T, _, f string) { must(t, os.Remove(f)); must(t, unix.Mkfifo(f, 0o600)) }, false},
		{"directory", func(t *testing.T, _, f string) { must(t, os.Remove(f)); must(t, os.Mkdir(f, 0o700)) }, false},
		{"too big", func(t *testing.T, _, f string) { must(t, os.WriteFile(f, make([]byte, 65), 0o600)) }, false},
		{"another user's file", func(t *testing.T, _, f string) {
			testutil.RequireRoot(t, "the test gives the file to another user")
			must(t, os.Chown(f, 65534, 65534))
		}, false},
		{"missing", func(t *testing.T, _, f string) { must(t, os.Remove(f)) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "cache")
			must(t, os.Mkdir(d, 0o700))
			f := filepath.Join(d, "entry")
			must(t, os.WriteFile(f, []byte("verdict"), 0o600))
			tc.setup(t, d, f)
			b, err := ReadPrivateFile(f, 64)
			if tc.ok != (err == nil) || (tc.ok && string(b) != "verdict") {
				t.Fatalf("ReadPrivateFile = %q, %v; want ok %v", b, err, tc.ok)
			}
		})
	}
}

// TakeSlot lets n holders at once, refuses the next with LimitExceeded at its bound (or
// its context's end), and a released slot is taken again at once.
func TestTakeSlot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "slots")
	var held []func()
	for i := range 3 {
		release, err := TakeSlot(context.Background(), dir, 3, 0, "testing")
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		held = append(held, release)
	}
	_, err := TakeSlot(context.Background(), dir, 3, 150*time.Millisecond, "testing")
	if vocab.ReasonOf(err) != vocab.ReasonLimitExceeded || !errors.Is(err, ErrSlotsBusy) || !strings.Contains(err.Error(), "testing") || !strings.Contains(err.Error(), "all 3") {
		t.Fatalf("a fourth holder: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := TakeSlot(ctx, dir, 3, time.Hour, "testing"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiter whose context ends: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		release, err := TakeSlot(context.Background(), dir, 3, 10*time.Second, "testing")
		if err == nil {
			release()
		}
		done <- err
	}()
	held[1]()
	if err := <-done; err != nil {
		t.Fatalf("a waiter after a release: %v", err)
	}
	if _, err := TakeSlot(context.Background(), dir, 0, 0, "testing"); err == nil {
		t.Fatal("zero slots were accepted")
	}
	// A planted symlink under a slot's name is refused, as for every Brewlet lock.
	other := filepath.Join(t.TempDir(), "slots")
	must(t, os.MkdirAll(other, 0o700))
	must(t, os.Symlink("/etc/passwd", filepath.Join(other, "slot-0.lock")))
	if _, err := TakeSlot(context.Background(), other, 2, 0, "testing"); err == nil {
		t.Fatal("a symlinked slot was opened")
	}
	held[0]()
	held[2]()
}
