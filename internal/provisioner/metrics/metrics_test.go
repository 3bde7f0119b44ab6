package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"brewlet.sh/brewlet/internal/hoststate"
)

func TestMetrics(t *testing.T) {
	l := hoststate.Under(t.TempDir())
	for gen := int64(1); gen <= 2; gen++ {
		if err := l.WriteGeneration(hoststate.Generation{ID: "py", Epoch: "e1", Generation: gen, Digest: "sha256:d" + string(rune('0'+gen)), Layers: []string{"sha256:aa"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.SetCurrent("py", hoststate.Ref{Epoch: "e1", Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.LeaseCurrent(hoststate.Lease{ContainerID: "c1", ID: "py", PodNamespace: "shop", PodName: "api-1", ContainerName: "api"}); err != nil {
		t.Fatal(err)
	}
	l.CountLaunch("started", "")
	l.CountLaunch("refused", "RuntimeImageRevoked")
	l.CountLaunch("refused", "RuntimeImageRevoked")
	reg := prometheus.NewRegistry()
	m := NewMetrics(l, reg)
	m.ObserveInstall("py", "success", 2*time.Second)
	m.ObserveInstall("py", "refused", time.Second)
	want := `
# HELP brewlet_container_runtime_image_info One series per running container: the runtime generation it started on.
# TYPE brewlet_container_runtime_image_info gauge
brewlet_container_runtime_image_info{container="api",digest="sha256:d1",epoch="e1",generation="1",id="py",namespace="shop",pod="api-1"} 1
# HELP brewlet_runtime_image_generations Installed generations on this node by runtime ID and state (current, retained).
# TYPE brewlet_runtime_image_generations gauge
brewlet_runtime_image_generations{id="py",state="current"} 1
brewlet_runtime_image_generations{id="py",state="retained"} 1
# HELP brewlet_runtime_image_install_requests_total Runtime generation installs on this node, by runtime ID and outcome (success, refused, failed).
# TYPE brewlet_runtime_image_install_requests_total counter
brewlet_runtime_image_install_requests_total{id="py",outcome="refused"} 1
brewlet_runtime_image_install_requests_total{id="py",outcome="success"} 1
# HELP brewlet_shim_launches_total Container starts through the brewlet shim by outcome and reason.
# TYPE brewlet_shim_launches_total counter
brewlet_shim_launches_total{outcome="refused",reason="RuntimeImageRevoked"} 2
brewlet_shim_launches_total{outcome="started",reason="none"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "brewlet_container_runtime_image_info",
		"brewlet_runtime_image_generations", "brewlet_runtime_image_install_requests_total", "brewlet_shim_launches_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "brewlet_runtime_image_install_duration_seconds"); n != 1 {
		t.Fatalf("install duration series: %d", n)
	}
	// Launch durations the shims recorded are folded in once, and stay counted.
	l.RecordLaunchDuration(20 * time.Millisecond)
	l.RecordLaunchDuration(30 * time.Millisecond)
	for range 2 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var count uint64
		var sum float64
		for _, mf := range mfs {
			if mf.GetName() == "brewlet_shim_launch_duration_seconds" {
				count, sum = mf.GetMetric()[0].GetHistogram().GetSampleCount(), mf.GetMetric()[0].GetHistogram().GetSampleSum()
			}
		}
		if count != 2 || sum < 0.049 || sum > 0.051 {
			t.Fatalf("launch durations: count %d sum %v, want 2 and 0.05", count, sum)
		}
	}
}

// The GC gauge is absent until a pass ran (no alert on a node that never swept), then says
// whether the last pass could confirm what is unused; removals add up.
func TestSweepMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(hoststate.Under(t.TempDir()), reg)
	if n := testutil.CollectAndCount(reg, "brewlet_provisioner_gc_confirmed"); n != 0 {
		t.Fatalf("before any pass: %d series, want none", n)
	}
	m.ObserveSweep(1, 3, nil)
	m.ObserveSweep(0, 0, errors.New("keeping everything: cannot read the mount table"))
	want := `
# HELP brewlet_provisioner_gc_confirmed 1 when the last garbage collection pass could tell what is unused; 0 when it could not and kept everything.
# TYPE brewlet_provisioner_gc_confirmed gauge
brewlet_provisioner_gc_confirmed 0
# HELP brewlet_provisioner_gc_removed_total Unused runtime generations and layers removed by garbage collection, by kind (generation, layer).
# TYPE brewlet_provisioner_gc_removed_total counter
brewlet_provisioner_gc_removed_total{kind="generation"} 1
brewlet_provisioner_gc_removed_total{kind="layer"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "brewlet_provisioner_gc_confirmed", "brewlet_provisioner_gc_removed_total"); err != nil {
		t.Fatal(err)
	}
	m.ObserveSweep(0, 0, nil)
	if v := testutil.ToFloat64(m.gcConfirmed.WithLabelValues()); v != 1 {
		t.Fatalf("after a confirmed pass: %v, want 1", v)
	}
}
