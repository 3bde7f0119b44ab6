package restarts

import (
	"strings"
	"testing"
	"time"

	"brewlet.sh/brewlet/internal/vocab"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestWindowAt(t *testing.T) {
	for _, tc := range []struct {
		name, schedule, tz string
		duration           time.Duration
		now                string
		open               bool
		edge               string
	}{
		{"inside a nightly window", "0 2 * * *", "UTC", 2 * time.Hour, "2026-12-03T03:00:00Z", true, "2026-12-03T04:00:00Z"},
		{"at its opening", "0 2 * * *", "UTC", 2 * time.Hour, "2026-12-03T02:00:00Z", true, "2026-12-03T04:00:00Z"},
		{"at its close", "0 2 * * *", "UTC", 2 * time.Hour, "2026-12-03T04:00:00Z", false, "2026-12-04T02:00:00Z"},
		{"before it", "0 2 * * *", "UTC", 2 * time.Hour, "2026-12-03T01:59:00Z", false, "2026-12-03T02:00:00Z"},
		// 02:00 in Berlin is 01:00 UTC in winter.
		{"in a time zone", "0 2 * * *", "Europe/Berlin", time.Hour, "2026-12-03T01:30:00Z", true, "2026-12-03T02:00:00Z"},
		{"in a time zone, outside", "0 2 * * *", "Europe/Berlin", time.Hour, "2026-12-03T02:30:00Z", false, "2026-12-04T01:00:00Z"},
		// Weekdays only: Thursday 2026-12-03 22:00 UTC; Saturday's and Sunday's are skipped.
		{"weekdays", "0 22 * * 1-5", "UTC", time.Hour, "2026-12-04T23:30:00Z", false, "2026-12-07T22:00:00Z"},
		{"a window over midnight", "30 23 * * *", "UTC", time.Hour, "2026-12-04T00:10:00Z", true, "2026-12-04T00:30:00Z"},
		// Overlapping windows: open from the earliest activation still within its duration.
		{"overlapping activations", "0 * * * *", "UTC", 90 * time.Minute, "2026-12-03T10:15:00Z", true, "2026-12-03T10:30:00Z"},
		{"a descriptor", "@daily", "UTC", 30 * time.Minute, "2026-12-03T00:20:00Z", true, "2026-12-03T00:30:00Z"},
	} {
		w, err := ParseWindow(tc.schedule, tc.duration, tc.tz)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		open, edge := w.At(mustTime(t, tc.now))
		if open != tc.open || !edge.Equal(mustTime(t, tc.edge)) {
			t.Errorf("%s: open %v edge %s, want %v %s", tc.name, open, edge.UTC().Format(time.RFC3339), tc.open, tc.edge)
		}
	}
}

func TestParseWindowRefuses(t *testing.T) {
	if w, err := ParseWindow("", 0, ""); w != nil || err != nil {
		t.Fatalf("no window: %v %v", w, err)
	}
	for _, tc := range []struct {
		schedule string
		duration time.Duration
		tz, err  string
	}{
		{"", time.Hour, "", "without a schedule"},
		{"0 2 * * *", 0, "", "duration 0s"},
		{"0 2 * * *", 30 * time.Second, "", "duration 30s"},
		{"0 2 * * *", 8 * 24 * time.Hour, "", "duration 192h"},
		{"0 2 * *", time.Hour, "", "five cron fields"},
		{"0 0 2 * * *", time.Hour, "", "five cron fields"},
		{"61 2 * * *", time.Hour, "", "five cron fields"},
		{"CRON_TZ=Europe/Berlin 0 2 * * *", time.Hour, "", "timeZone"},
		{"0 2 * * *", time.Hour, "Mars/Olympus", "IANA"},
		{strings.Repeat("1,", 100) + "2 * * * *", time.Hour, "", "at most 128"},
	} {
		if _, err := ParseWindow(tc.schedule, tc.duration, tc.tz); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q %s %q: %v, want %q", tc.schedule, tc.duration, tc.tz, err, tc.err)
		}
	}
}

// Outside the restart window nothing new starts and the waiting records say when it
// opens; restarts in progress go on. Inside it, restarts start.
func TestDecideWindow(t *testing.T) {
	p := policy
	w, err := ParseWindow("0 2 * * *", time.Hour, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	p.Window = w
	ws := []Workload{wl("a", pod("p1", before))}
	tasks := running(map[string]int64{"p1": 2})
	at := time.Date(now.Year(), now.Month(), now.Day(), 12, 0, 0, 0, time.UTC)
	got := Decide(target, ws, tasks, nil, 0, p, at)
	if s := summary(got); s != "a:Pending" || got[0].Record.Reason != string(vocab.ReasonOutsideRestartWindow) ||
		!strings.Contains(got[0].Record.Message, "opens next at") {
		t.Fatalf("outside the window: %q %+v", s, got[0].Record)
	}
	if s := summary(Decide(target, ws, tasks, nil, 0, p, at.Add(14*time.Hour+30*time.Minute))); s != "a:InProgress+patch" {
		t.Fatalf("inside the window: %q", s)
	}
}
