// Package benchratio summarizes same-run benchmark ratios (Brewlet's path over the stock
// path) across repetitions and compares a run with the ratios last recorded in
// docs/benchmarks.md: the regression guard of `make bench`. Pure functions, no timing.
package benchratio

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Spread is a ratio's minimum, median and maximum over a run's repetitions.
type Spread struct{ Min, Median, Max float64 }

// Of summarizes ratios (at least one; NaN and infinite values are a broken measurement and
// make the spread NaN so that no comparison passes on them).
func Of(ratios []float64) Spread {
	if len(ratios) == 0 {
		return Spread{math.NaN(), math.NaN(), math.NaN()}
	}
	s := slices.Clone(ratios)
	for _, r := range s {
		if math.IsNaN(r) || math.IsInf(r, 0) {
			return Spread{math.NaN(), math.NaN(), math.NaN()}
		}
	}
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Min: s[0], Median: med, Max: s[len(s)-1]}
}

// Width is the run's own spread: how far apart its repetitions landed.
func (s Spread) Width() float64 { return s.Max - s.Min }

// Row is one guarded figure as docs/benchmarks.md keeps it:
//
//	| metric | stock (median) | brewlet (median) | 1.05× | 0.98–1.12× | ≤ 1.1× |
//
// Metric names must be unique across the file: the first row of a name is its record.
type Row struct {
	Metric, Stock, Brewlet, Target string
	Ratio                          Spread
}

// String renders the row in the form Recorded reads back.
func (r Row) String() string {
	return fmt.Sprintf("| %s | %s | %s | %.2f× | %.2f–%.2f× | %s |", r.Metric, r.Stock, r.Brewlet, r.Ratio.Median, r.Ratio.Min, r.Ratio.Max, r.Target)
}

var (
	medianCell = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)×$`)
	spreadCell = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)–([0-9]+(?:\.[0-9]+)?)×$`)
)

// maxLine bounds one line of the document read (a table row is far shorter).
const maxLine = 64 << 10

// Recorded reads the guarded rows of a benchmarks document: table rows whose fourth cell is
// a median ratio and fifth a min–max spread. Other lines are ignored.
func Recorded(doc io.Reader) (map[string]Spread, error) {
	out := map[string]Spread{}
	sc := bufio.NewScanner(doc)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 6 {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		m, sp := medianCell.FindStringSubmatch(cells[3]), spreadCell.FindStringSubmatch(cells[4])
		if m == nil || sp == nil || cells[0] == "" {
			continue
		}
		if _, seen := out[cells[0]]; seen {
			continue
		}
		med, _ := strconv.ParseFloat(m[1], 64)
		lo, _ := strconv.ParseFloat(sp[1], 64)
		hi, _ := strconv.ParseFloat(sp[2], 64)
		out[cells[0]] = Spread{Min: lo, Median: med, Max: hi}
	}
	return out, sc.Err()
}

// Regressions names each figure of this run whose median ratio (lower is better) is worse
// than the recorded median by more than the run's own spread; a figure never recorded, or
// measured NaN, is named too, so that a broken or new measurement is seen rather than passed.
func Regressions(recorded map[string]Spread, run []Row) []string {
	var out []string
	for _, r := range run {
		rec, ok := recorded[r.Metric]
		switch {
		case math.IsNaN(r.Ratio.Median):
			out = append(out, fmt.Sprintf("%s: no valid measurement in this run", r.Metric))
		case !ok:
			out = append(out, fmt.Sprintf("%s: no recorded figure to compare with (record this run's row in docs/benchmarks.md)", r.Metric))
		case r.Ratio.Median-rec.Median > r.Ratio.Width():
			out = append(out, fmt.Sprintf("%s: median %.2f× against %.2f× recorded, worse by %.2f, more than this run's spread %.2f",
				r.Metric, r.Ratio.Median, rec.Median, r.Ratio.Median-rec.Median, r.Ratio.Width()))
		}
	}
	return out
}
