//go:build bench

package bench

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// promSample is one sample of a Prometheus text exposition: a histogram or summary gives
// two, <name>_sum and <name>_count, as the text format spells them.
type promSample struct {
	metric string
	labels map[string]string
	value  float64
}

type promSamples []promSample

// scrape parses a Prometheus text exposition (expfmt) and returns the samples of the named
// metrics. A name whose family the exposition lacks ends the test: a renamed metric must
// not read as zero.
func scrape(t testing.TB, body string, metrics ...string) promSamples {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus text: %v", err)
	}
	want := map[string]bool{}
	for _, m := range metrics {
		want[m] = true
	}
	seen := map[string]bool{}
	var out promSamples
	add := func(name string, labels map[string]string, v float64) {
		if want[name] {
			seen[name] = true
			out = append(out, promSample{metric: name, labels: labels, value: v})
		}
	}
	for name, fam := range fams {
		for _, m := range fam.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			switch fam.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				add(name+"_sum", labels, m.GetHistogram().GetSampleSum())
				add(name+"_count", labels, float64(m.GetHistogram().GetSampleCount()))
			case dto.MetricType_SUMMARY:
				add(name+"_sum", labels, m.GetSummary().GetSampleSum())
				add(name+"_count", labels, float64(m.GetSummary().GetSampleCount()))
			case dto.MetricType_COUNTER:
				add(name, labels, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, labels, m.GetGauge().GetValue())
			default:
				add(name, labels, m.GetUntyped().GetValue())
			}
		}
		// A family with no samples yet still exists.
		for _, n := range []string{name, name + "_sum", name + "_count"} {
			if want[n] && len(fam.Metric) == 0 {
				seen[n] = true
			}
		}
	}
	for _, m := range metrics {
		if !seen[m] {
			t.Fatalf("the exposition has no metric %s", m)
		}
	}
	return out
}
