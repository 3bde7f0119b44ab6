//go:build bench

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"brewlet.sh/brewlet/test/benchratio"
	"brewlet.sh/brewlet/test/framework"
)

func mean(xs []int) float64 {
	sum := 0
	for _, x := range xs {
		sum += x
	}
	return float64(sum) / float64(len(xs))
}

// Units of a ratioRow's medians.
func dur(v float64) string { return time.Duration(v).Round(time.Millisecond).String() }

func kib(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

// benchReps is the benches' default number of repetitions. The handler or way measured
// second in a repetition meets a node that has already run the first one's containers, and
// on the development machine that cost it 20–30 ms per container stop (docs/benchmarks.md,
// 2026-12-06); which goes first alternates, so an even number gives both sides the same
// number of first places (with 5, the side that starts second went second three times).
const benchReps = 6

// ratioRow turns per-repetition measurements [stock, brewlet] into a guarded row: the
// ratio of each repetition (brewlet over stock, same node, same run) summarized.
func ratioRow(metric string, m [2][]float64, unit func(float64) string, target string) benchratio.Row {
	ratios := make([]float64, len(m[0]))
	for i := range m[0] {
		ratios[i] = m[1][i] / m[0][i]
	}
	return benchratio.Row{Metric: metric, Stock: unit(benchratio.Of(m[0]).Median), Brewlet: unit(benchratio.Of(m[1]).Median), Target: target, Ratio: benchratio.Of(ratios)}
}

// benchGuard prints the rows as the table docs/benchmarks.md keeps and fails the bench for
// each figure worse than recorded there by more than this run's spread (the regression
// guard; `make bench` shows the REGRESSION lines).
func benchGuard(t *testing.T, title string, rows []benchratio.Row) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n| %s | stock (median) | brewlet (median) | ratio (median) | min–max | target |\n|---|---|---|---|---|---|\n", title)
	for _, r := range rows {
		b.WriteString(r.String() + "\n")
	}
	t.Log(b.String())
	fmt.Print(b.String())
	f, err := os.Open(filepath.Join(framework.RepoRoot(t), "docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	rec, err := benchratio.Recorded(f)
	if err != nil {
		t.Fatalf("docs/benchmarks.md: %v", err)
	}
	for _, msg := range benchratio.Regressions(rec, rows) {
		fmt.Printf("REGRESSION: %s\n", msg)
		t.Errorf("regression guard: %s", msg)
	}
}
