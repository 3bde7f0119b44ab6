package metrics

import (
	"io/fs"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"brewlet.sh/brewlet/internal/hoststate"
)

// Metrics are the node's Prometheus metrics. Install counters are updated as installs
// happen; everything read from disk (generations, storage, bindings, shim launches) is
// computed at scrape time, so the numbers are never stale and cost nothing between scrapes.
type Metrics struct {
	Layout           hoststate.Layout
	installRequests  *prometheus.CounterVec
	installDurations *prometheus.HistogramVec
	gcConfirmed      *prometheus.GaugeVec // no labels; absent until the first pass
	gcRemoved        *prometheus.CounterVec
	generations      *prometheus.Desc
	storage          *prometheus.Desc
	info             *prometheus.Desc
	launches         *prometheus.Desc
	// launchDurations folds the shim's duration records in at each scrape (foldMu: two
	// scrapes at once must not fold the same records twice or race on the files).
	launchDurations prometheus.Histogram
	foldMu          sync.Mutex
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(l hoststate.Layout, reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Layout: l,
		installRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "brewlet_runtime_image_install_requests_total",
			Help: "Runtime generation installs on this node, by runtime ID and outcome (success, refused, failed)."}, []string{"id", "outcome"}),
		installDurations: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "brewlet_runtime_image_install_duration_seconds",
			Help: "Time to install a runtime generation (pull, verify, extract, validate).", Buckets: prometheus.ExponentialBuckets(0.1, 2, 12)}, []string{"id"}),
		// A sweep that cannot read the leases, the mount table or a generation's record keeps
		// everything: the node's disk only grows until someone looks (docs/observability.md).
		gcConfirmed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "brewlet_provisioner_gc_confirmed",
			Help: "1 when the last garbage collection pass could tell what is unused; 0 when it could not and kept everything."}, nil),
		gcRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "brewlet_provisioner_gc_removed_total",
			Help: "Unused runtime generations and layers removed by garbage collection, by kind (generation, layer)."}, []string{"kind"}),
		generations: prometheus.NewDesc("brewlet_runtime_image_generations",
			"Installed generations on this node by runtime ID and state (current, retained).", []string{"id", "state"}, nil),
		storage: prometheus.NewDesc("brewlet_shared_storage_bytes",
			"Bytes used by the shared runtime layer cache on this node.", nil, nil),
		info: prometheus.NewDesc("brewlet_container_runtime_image_info",
			"One series per running container: the runtime generation it started on.",
			[]string{"namespace", "pod", "container", "id", "epoch", "generation", "digest"}, nil),
		launches: prometheus.NewDesc("brewlet_shim_launches_total",
			"Container starts through the brewlet shim by outcome and reason.", []string{"outcome", "reason"}, nil),
	}
	m.launchDurations = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "brewlet_shim_launch_duration_seconds",
		Help:    "Time the brewlet shim took to create a container that started: checks, composition and runc's create (from the shim's records, folded in at scrape time).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)})
	// Shims time their starts only once the directory exists; without it the histogram
	// stays empty and nothing else changes.
	_ = l.EnableLaunchDurations()
	reg.MustRegister(m.installRequests, m.installDurations, m.gcConfirmed, m.gcRemoved, m)
	return m
}

// ObserveInstall records one install attempt.
func (m *Metrics) ObserveInstall(id, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.installRequests.WithLabelValues(id, outcome).Inc()
	if outcome == "success" {
		m.installDurations.WithLabelValues(id).Observe(d.Seconds())
	}
}

// ObserveSweep records one garbage collection pass: what it removed, and whether it could
// confirm what is unused (err == nil).
func (m *Metrics) ObserveSweep(generations, layers int, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.gcConfirmed.WithLabelValues().Set(0)
	} else {
		m.gcConfirmed.WithLabelValues().Set(1)
	}
	m.gcRemoved.WithLabelValues("generation").Add(float64(generations))
	m.gcRemoved.WithLabelValues("layer").Add(float64(layers))
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.generations
	ch <- m.storage
	ch <- m.info
	ch <- m.launches
	m.launchDurations.Describe(ch)
}

// Collect implements prometheus.Collector by reading the host state.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	l := m.Layout
	ids, _ := l.RuntimeIDs()
	for _, id := range ids {
		cur, cerr := l.Current(id)
		counts := map[string]float64{"current": 0, "retained": 0}
		refs, _ := l.Generations(id)
		for _, r := range refs {
			if cerr == nil && cur == r {
				counts["current"]++
			} else {
				counts["retained"]++
			}
		}
		for state, v := range counts {
			ch <- prometheus.MustNewConstMetric(m.generations, prometheus.GaugeValue, v, id, state)
		}
	}
	var size int64
	_ = filepath.WalkDir(l.LayerDir(""), func(_ string, de fs.DirEntry, err error) error {
		if err == nil && de.Type().IsRegular() {
			if fi, err := de.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	ch <- prometheus.MustNewConstMetric(m.storage, prometheus.GaugeValue, float64(size))
	leases, _ := l.Leases()
	for _, ls := range leases {
		digest := ""
		if g, err := l.ReadGeneration(ls.ID, hoststate.Ref{Epoch: ls.Epoch, Generation: ls.Generation}); err == nil {
			digest = g.Digest
		}
		ch <- prometheus.MustNewConstMetric(m.info, prometheus.GaugeValue, 1, ls.PodNamespace, ls.PodName, ls.ContainerName,
			ls.ID, ls.Epoch, strconv.FormatInt(ls.Generation, 10), digest)
	}
	launches, _ := l.Launches()
	for _, c := range launches {
		ch <- prometheus.MustNewConstMetric(m.launches, prometheus.CounterValue, float64(c.Count), c.Outcome, c.Reason)
	}
	m.foldMu.Lock()
	for _, d := range l.TakeLaunchDurations() {
		m.launchDurations.Observe(d.Seconds())
	}
	m.foldMu.Unlock()
	m.launchDurations.Collect(ch)
}
