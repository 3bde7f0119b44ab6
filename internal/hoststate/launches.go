package hoststate

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LaunchCounters are the shim's launch counters and durations, read by the agent's
// metrics. Its methods are promoted to Layout.
type LaunchCounters struct{ Roots }

// MaxPendingLaunchDurations bounds the duration records waiting for the agent: a node
// whose agent is down keeps at most this many (later launches are not timed, only counted).
const MaxPendingLaunchDurations = 1024

// maxDurationRecord is the most a duration record may hold ("12.345678901\n" is 13 bytes).
const maxDurationRecord = 32

// LaunchDurationsDir holds one small file per timed launch until the agent folds it into
// its histogram.
func (l LaunchCounters) LaunchDurationsDir() string {
	return filepath.Join(l.LaunchesDir(), "durations")
}

// EnableLaunchDurations makes the directory shims leave durations in: the agent calls it
// when it exports them, so a node without metrics costs each start one failed open.
func (l LaunchCounters) EnableLaunchDurations() error {
	return os.MkdirAll(l.LaunchDurationsDir(), 0o755)
}

// RecordLaunchDuration leaves one start's duration for the agent to export, if it asked
// (EnableLaunchDurations). Like CountLaunch it never fails a launch; past
// MaxPendingLaunchDurations it records nothing.
func (l LaunchCounters) RecordLaunchDuration(d time.Duration) {
	dir := l.LaunchDurationsDir()
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	names, _ := f.Readdirnames(MaxPendingLaunchDurations)
	_ = f.Close()
	if len(names) >= MaxPendingLaunchDurations {
		return
	}
	name := strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.Itoa(os.Getpid())
	tmp := filepath.Join(dir, ".tmp-"+name)
	if os.WriteFile(tmp, []byte(strconv.FormatFloat(d.Seconds(), 'f', 9, 64)+"\n"), 0o644) != nil {
		_ = os.Remove(tmp)
		return
	}
	if os.Rename(tmp, filepath.Join(dir, name)) != nil {
		_ = os.Remove(tmp)
	}
}

// TakeLaunchDurations reads and removes the pending duration records, at most
// MaxPendingLaunchDurations per call. A record that does not hold one plausible duration
// (0 to an hour) is removed and skipped.
func (l LaunchCounters) TakeLaunchDurations() []time.Duration {
	f, err := os.Open(l.LaunchDurationsDir())
	if err != nil {
		return nil
	}
	names, _ := f.Readdirnames(MaxPendingLaunchDurations)
	_ = f.Close()
	var out []time.Duration
	for _, n := range names {
		if strings.HasPrefix(n, ".tmp-") {
			continue // being written
		}
		p := filepath.Join(l.LaunchDurationsDir(), n)
		if d, ok := readDurationRecord(p); ok {
			out = append(out, d)
		}
		_ = os.Remove(p)
	}
	return out
}

func readDurationRecord(p string) (time.Duration, bool) {
	// Not a link, not a FIFO that would block the scrape: a regular file only.
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, false
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return 0, false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxDurationRecord+1))
	if err != nil {
		return 0, false
	}
	return ParseDurationRecord(b)
}

// ParseDurationRecord reads one record: seconds as a decimal number and a newline.
func ParseDurationRecord(b []byte) (time.Duration, bool) {
	if len(b) > maxDurationRecord {
		return 0, false
	}
	s, ok := strings.CutSuffix(string(b), "\n")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0 && v <= 3600) {
		return 0, false
	}
	return time.Duration(v * float64(time.Second)), true
}

// CountLaunch records one container start attempt by outcome ("started" or "refused") and
// reason ("" for started). Counting never fails a launch.
func (l LaunchCounters) CountLaunch(outcome, reason string) {
	if reason == "" {
		reason = "none"
	}
	_ = os.MkdirAll(l.LaunchesDir(), 0o755)
	f, err := os.OpenFile(filepath.Join(l.LaunchesDir(), outcome+"_"+reason), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	_, _ = f.Write([]byte{'\n'})
	_ = f.Close()
}

// Launch is one launch counter.
type Launch struct {
	Outcome, Reason string
	Count           int64
}

// Launches reads the launch counters.
func (l LaunchCounters) Launches() ([]Launch, error) {
	ents, err := os.ReadDir(l.LaunchesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Launch
	for _, e := range ents {
		o, r, ok := strings.Cut(e.Name(), "_")
		if !ok {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, Launch{Outcome: o, Reason: r, Count: fi.Size()})
	}
	return out, nil
}
