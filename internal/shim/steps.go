package shim

import (
	"fmt"
	"os"
	"strings"
	"time"

	"brewlet.sh/brewlet/internal/vocab"
)

// defaultSlowLaunch is how long a create may take before the shim logs where the time went
// (the metric says that a node is slow; the log line says which step).
const defaultSlowLaunch = time.Second

// steps times the phases of one create, in fixed arrays: nothing is allocated per create.
type steps struct {
	start, last time.Time
	n           int
	names       [maxSteps]string
	took        [maxSteps]time.Duration
}

// maxSteps is the number of marks a create makes; a mark beyond it is dropped.
const maxSteps = 10

func newSteps(now time.Time) *steps { return &steps{start: now, last: now} }

// mark ends the phase called name at now.
func (s *steps) mark(name string, now time.Time) {
	if s.n < maxSteps {
		s.names[s.n], s.took[s.n] = name, now.Sub(s.last)
		s.n++
	}
	s.last = now
}

// slowLaunch returns the log line of a create that took longer than threshold ("" if not).
func (s *steps) slowLaunch(threshold time.Duration) string {
	total := s.last.Sub(s.start)
	if total < threshold {
		return ""
	}
	parts := make([]string, s.n)
	for i, n := range s.names[:s.n] {
		parts[i] = fmt.Sprintf("%s=%s", n, s.took[i].Round(time.Microsecond))
	}
	return fmt.Sprintf("slow launch: %s in total (threshold %s): %s", total.Round(time.Microsecond), threshold, strings.Join(parts, " "))
}

// slowLaunchThreshold is BREWLET_SLOW_LAUNCH when it is a valid duration (0s logs every
// create), else defaultSlowLaunch.
func slowLaunchThreshold() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(vocab.EnvSlowLaunch)); err == nil && d >= 0 {
		return d
	}
	return defaultSlowLaunch
}
