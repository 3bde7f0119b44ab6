package restarts

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Window is the restart window (the chart's operator.rotationRestarts.window): restarts
// start only from an activation of Schedule, evaluated in Location, until Duration later.
// It is computed from the clock alone, so operator restarts and leader changes keep it.
type Window struct {
	Spec     string // the schedule as given, for messages
	Duration time.Duration
	Location *time.Location
	schedule cron.Schedule
}

// Bounds of a window: a schedule is one line, a window at least a minute (the schedule's
// resolution) and at most a week (a longer one is always open: leave the window unset).
const (
	maxScheduleLen    = 128
	minWindowDuration = time.Minute
	maxWindowDuration = 7 * 24 * time.Hour
)

var windowParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseWindow reads a window: a five-field cron schedule (minute hour day-of-month month
// day-of-week, or a descriptor such as @daily), its duration and an IANA time zone ("" is
// UTC). An empty schedule is no window (restarts may start at any time).
func ParseWindow(schedule string, duration time.Duration, timeZone string) (*Window, error) {
	schedule = strings.TrimSpace(schedule)
	if schedule == "" {
		if duration != 0 {
			return nil, fmt.Errorf("restart window: a duration (%s) without a schedule; set both or neither", duration)
		}
		return nil, nil
	}
	if len(schedule) > maxScheduleLen {
		return nil, fmt.Errorf("restart window: schedule of %d characters, at most %d", len(schedule), maxScheduleLen)
	}
	if strings.HasPrefix(schedule, "CRON_TZ=") || strings.HasPrefix(schedule, "TZ=") {
		return nil, fmt.Errorf("restart window %q: give the time zone as the window's timeZone, not in the schedule", schedule)
	}
	if duration < minWindowDuration || duration > maxWindowDuration {
		return nil, fmt.Errorf("restart window %q: duration %s, want between %s and %s", schedule, duration, minWindowDuration, maxWindowDuration)
	}
	if timeZone == "" {
		timeZone = "UTC"
	}
	loc, err := time.LoadLocation(timeZone)
	if err != nil {
		return nil, fmt.Errorf("restart window: time zone %q: %v (want an IANA name such as Europe/Berlin)", timeZone, err)
	}
	sched, err := windowParser.Parse(schedule)
	if err != nil {
		return nil, fmt.Errorf("restart window: schedule %q: %v (want five cron fields: minute hour day-of-month month day-of-week)", schedule, err)
	}
	return &Window{Spec: schedule, Duration: duration, Location: loc, schedule: sched}, nil
}

// At reports whether the window is open at now, and when the earliest activation's window
// open now closes (a later activation may extend it) or, closed, when the next one opens
// (zero if the schedule never fires again).
func (w *Window) At(now time.Time) (open bool, edge time.Time) {
	// The first activation after now-Duration: at or before now it is the window now open.
	start := w.schedule.Next(now.Add(-w.Duration).In(w.Location))
	if start.IsZero() {
		return false, time.Time{}
	}
	if !start.After(now) {
		return true, start.Add(w.Duration)
	}
	return false, start
}

func (w *Window) String() string {
	return fmt.Sprintf("%q for %s (%s)", w.Spec, w.Duration, w.Location)
}
