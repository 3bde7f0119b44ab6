package hoststate

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// CountLaunch records one container start attempt by outcome ("started" or "refused") and
// reason ("" for started). Counting never fails a launch.
func (l Layout) CountLaunch(outcome, reason string) {
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
func (l Layout) Launches() ([]Launch, error) {
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
