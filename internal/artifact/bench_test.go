package artifact

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkValidateWhiteouts validates a lower layer of n files and an upper layer of n
// whiteouts hiding them. Time per entry stays flat as n doubles: composing is linear (a
// whole-view scan per whiteout made it quadratic). Run:
//
//	go test -run '^$' -bench BenchmarkValidateWhiteouts -benchtime 5x ./internal/artifact/
func BenchmarkValidateWhiteouts(b *testing.B) {
	for _, n := range []int{10_000, 20_000, 40_000} {
		lower := []Entry{{Path: "app", Type: TypeDir, Mode: 0o755}}
		upper := []Entry{{Path: "app", Type: TypeDir, Mode: 0o755}}
		for i := range n {
			p := fmt.Sprintf("app/d%03d/f%06d", i%100, i)
			lower = append(lower, Entry{Path: p, Type: TypeFile, Mode: 0o644})
			upper = append(upper, Entry{Path: p, Type: TypeWhiteout})
		}
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			for b.Loop() {
				vs, err := Validate(NewBudget(context.Background(), DefaultLimits()), [][]Entry{lower, upper})
				if err != nil || len(vs) > 0 {
					b.Fatal(err, vs)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(2*n), "ns/entry")
		})
	}
}
