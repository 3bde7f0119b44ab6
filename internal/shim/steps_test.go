package shim

import (
	"strings"
	"testing"
	"time"
)

func TestSlowLaunch(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	s := newSteps(t0)
	s.mark("spec-check", t0.Add(2*time.Millisecond))
	s.mark("validate-app", t0.Add(1200*time.Millisecond))
	s.mark("runc-create", t0.Add(1500*time.Millisecond))
	for _, tc := range []struct {
		threshold time.Duration
		want      string
	}{
		{time.Second, "slow launch: 1.5s in total (threshold 1s): spec-check=2ms validate-app=1.198s runc-create=300ms"},
		{0, "slow launch: 1.5s in total"},
		{2 * time.Second, ""},
	} {
		got := s.slowLaunch(tc.threshold)
		if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
			t.Errorf("threshold %s: %q, want %q", tc.threshold, got, tc.want)
		}
	}
	for _, tc := range []struct {
		env  string
		want time.Duration
	}{{"", time.Second}, {"0s", 0}, {"250ms", 250 * time.Millisecond}, {"-1s", time.Second}, {"soon", time.Second}} {
		t.Setenv("BREWLET_SLOW_LAUNCH", tc.env)
		if got := slowLaunchThreshold(); got != tc.want {
			t.Errorf("BREWLET_SLOW_LAUNCH=%q: %s, want %s", tc.env, got, tc.want)
		}
	}
}
