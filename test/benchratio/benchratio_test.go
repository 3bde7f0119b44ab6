package benchratio

import (
	"math"
	"os"
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Spread
	}{
		{[]float64{1.2}, Spread{1.2, 1.2, 1.2}},
		{[]float64{1.3, 0.9, 1.1}, Spread{0.9, 1.1, 1.3}},
		{[]float64{1, 2, 3, 4}, Spread{1, 2.5, 4}},
	} {
		if got := Of(tc.in); got != tc.want {
			t.Errorf("Of(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	for _, bad := range [][]float64{nil, {1, math.NaN()}, {math.Inf(1)}} {
		if got := Of(bad); !math.IsNaN(got.Median) {
			t.Errorf("Of(%v) = %+v, want NaN", bad, got)
		}
	}
}

const doc = `# Benchmarks

| metric | runc | brewlet | ratio | min–max | target |
|---|---|---|---|---|---|
| shim: create+start, warm (median) | 180ms | 190ms | 1.05× | 0.98–1.12× | ≤ 1.0× |
| shim: PSS per pod | 7000 | 8000 | 1.14× | 1.13–1.15× | ≤ 1.1× |
| shim: PSS per pod | 7000 | 9000 | 1.29× | 1.28–1.30× | ≤ 1.1× |
| an older row without a spread | 1 | 2 | 2.00× | ≤ 1.0× |
| install: cold | 400ms | 300ms | 0.75× | n/a | ≤ 0.8× |
`

func TestRecorded(t *testing.T) {
	got, err := Recorded(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Spread{
		"shim: create+start, warm (median)": {0.98, 1.05, 1.12},
		"shim: PSS per pod":                 {1.13, 1.14, 1.15}, // the first row of a name
	}
	if len(got) != len(want) {
		t.Fatalf("Recorded = %+v, want %+v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %+v, want %+v", k, got[k], v)
		}
	}
	// A line longer than the bound is an error, not a silent truncation.
	if _, err := Recorded(strings.NewReader(strings.Repeat("x", maxLine+1))); err == nil {
		t.Error("an overlong line was accepted")
	}
}

func TestRegressions(t *testing.T) {
	rec := map[string]Spread{"warm": {0.98, 1.05, 1.12}, "pss": {1.13, 1.14, 1.15}}
	row := func(m string, s Spread) Row { return Row{Metric: m, Ratio: s} }
	for _, tc := range []struct {
		name string
		run  Row
		want string // "" = no regression
	}{
		{"better", row("warm", Spread{0.9, 0.95, 1.0}), ""},
		{"worse within the run's spread", row("warm", Spread{1.0, 1.15, 1.3}), ""},
		{"worse beyond the run's spread", row("warm", Spread{1.18, 1.2, 1.22}), "warm: median 1.20× against 1.05× recorded"},
		{"steady figure crept up", row("pss", Spread{1.19, 1.2, 1.21}), "pss: median 1.20×"},
		{"never recorded", row("new", Spread{1, 1, 1}), "new: no recorded figure"},
		{"broken measurement", row("warm", Of(nil)), "warm: no valid measurement"},
	} {
		got := Regressions(rec, []Row{tc.run})
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("%s: %v, want none", tc.name, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("%s: %v, want one naming %q", tc.name, got, tc.want)
		}
	}
}

func TestRowRoundTrip(t *testing.T) {
	r := Row{Metric: "install: cold", Stock: "400ms", Brewlet: "300ms", Target: "≤ 0.8×", Ratio: Spread{0.7, 0.75, 0.8}}
	got, err := Recorded(strings.NewReader(r.String()))
	if err != nil || got["install: cold"] != r.Ratio {
		t.Fatalf("Recorded(%q) = %+v, %v", r.String(), got, err)
	}
}

// The figures `make bench` guards are recorded in docs/benchmarks.md: an edit of the file
// that loses one makes the next bench fail with "no recorded figure", so it is caught here.
func TestBenchmarksDocRecordsTheGuardedFigures(t *testing.T) {
	f, err := os.Open("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	rec, err := Recorded(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{
		"shim: PSS per pod (KiB)", "shim: create+start, first container", "shim: create+start, warm (median)",
		"shim: 20 creates at once, p50", "shim: 20 creates at once, p99",
		"install: cold, against ctr image pull + unpack", "install: rotation to the security update (2 of 3 layers changed)",
		"payoff: CVE rotation on the node (install or pulls + 20 restarts)", "payoff: restart on a settled node, create+start (median)",
		"payoff: restart, stop+remove, stop (median)", "payoff: restart, stop+remove, remove (median)",
		"payoff: new app version, pull+create+start (median)", "payoff: 20 creates at once, p50", "payoff: 20 creates at once, p99",
	} {
		s, ok := rec[m]
		if !ok || !(s.Min <= s.Median && s.Median <= s.Max) {
			t.Errorf("docs/benchmarks.md records %q as %+v (present %v)", m, s, ok)
		}
	}
}
