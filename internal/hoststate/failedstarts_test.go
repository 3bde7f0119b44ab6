package hoststate

import (
	"os"
	"testing"
	"time"
)

func TestIsFailedStart(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name           string
		code           uint32
		started, ended time.Time
		killed, want   bool
	}{
		{"an error within the window", 1, t0, t0.Add(2 * time.Second), false, true},
		{"an error after running a while", 1, t0, t0.Add(2 * time.Minute), false, false},
		{"success", 0, t0, t0.Add(time.Second), false, false},
		{"stopped by someone", 137, t0, t0.Add(time.Second), true, false},
		{"no start time", 1, time.Time{}, t0, false, false},
		{"exited before it started (a clock)", 1, t0, t0.Add(-time.Second), false, false},
	} {
		if got := IsFailedStart(tc.code, tc.started, tc.ended, tc.killed); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Records are read newest first; old and unreadable ones are removed; past the bound no
// record is written.
func TestFailedStartsRecordAndExpire(t *testing.T) {
	l := Under(t.TempDir())
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for i, age := range []time.Duration{time.Minute, 20 * time.Minute, 2 * time.Minute} {
		f := FailedStart{Lease: Lease{ContainerID: "c" + string(rune('a'+i)), ID: "python", Epoch: "e1", Generation: 3,
			CreatedAt: now.Add(-age - time.Second)}, ExitCode: 1, ExitedAt: now.Add(-age)}
		if err := l.RecordFailedStart(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(l.FailedStartsDir()+"/broken.json", []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := l.ReadFailedStarts(now, 10*time.Minute, true)
	if err != nil || len(got) != 2 || got[0].ContainerID != "ca" || got[1].ContainerID != "cc" {
		t.Fatalf("records %+v %v; want ca then cc", got, err)
	}
	ents, _ := os.ReadDir(l.FailedStartsDir())
	if len(ents) != 2 {
		t.Fatalf("%d files left; the old and the unreadable one should be gone", len(ents))
	}
	if err := l.RecordFailedStart(FailedStart{Lease: Lease{ContainerID: "../x", ID: "python"}}); err == nil {
		t.Fatal("a container ID that leaves the directory was recorded")
	}
	if !l.HasFailedStarts() {
		t.Fatal("records present, none seen")
	}
	if err := l.RemoveFailedStarts(); err != nil || l.HasFailedStarts() {
		t.Fatalf("records left after their removal: %v", err)
	}
}
