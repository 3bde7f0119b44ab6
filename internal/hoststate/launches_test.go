package hoststate

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Durations recorded by shims are taken once each; hostile or broken records are dropped
// without blocking (a FIFO, a link, an oversized or malformed file); the pending records
// are bounded.
func TestLaunchDurations(t *testing.T) {
	l := Under(t.TempDir())
	l.RecordLaunchDuration(time.Second) // not asked for: nothing is recorded
	if err := l.EnableLaunchDurations(); err != nil {
		t.Fatal(err)
	}
	if got := l.TakeLaunchDurations(); len(got) != 0 {
		t.Fatalf("nothing recorded, took %v", got)
	}
	l.RecordLaunchDuration(150 * time.Millisecond)
	l.RecordLaunchDuration(2 * time.Second)
	dir := l.LaunchDurationsDir()
	for name, body := range map[string]string{"bad-text": "fast\n", "no-newline": "0.5", "negative": "-1\n", "huge": "99999\n",
		"oversized": "0.000000000000000000000000000000000001\n", ".tmp-half": "0.1\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	got := l.TakeLaunchDurations()
	var sum time.Duration
	for _, d := range got {
		sum += d
	}
	if len(got) != 2 || sum != 2150*time.Millisecond {
		t.Fatalf("took %v, want the two recorded durations", got)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 1 || left[0].Name() != ".tmp-half" {
		t.Fatalf("left %v: every record is removed once read, a record being written stays", left)
	}
	if again := l.TakeLaunchDurations(); len(again) != 0 {
		t.Fatalf("taken twice: %v", again)
	}
	// Bounded: a node whose agent is away keeps at most MaxPendingLaunchDurations records.
	for range MaxPendingLaunchDurations + 5 {
		l.RecordLaunchDuration(time.Millisecond)
	}
	if names, _ := os.ReadDir(dir); len(names) > MaxPendingLaunchDurations {
		t.Fatalf("%d pending records, bound %d", len(names), MaxPendingLaunchDurations)
	}
	if n := len(l.TakeLaunchDurations()); n == 0 || n > MaxPendingLaunchDurations {
		t.Fatalf("took %d", n)
	}
}

func FuzzParseDurationRecord(f *testing.F) {
	for _, s := range []string{"0.1\n", "3600\n", "3600.000000001\n", "1e3\n", "NaN\n", "+Inf\n", "", "\n", "0x10\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, ok := ParseDurationRecord(b)
		if ok && (d < 0 || d > time.Hour || len(b) > maxDurationRecord) {
			t.Fatalf("%q accepted as %v", b, d)
		}
	})
}
