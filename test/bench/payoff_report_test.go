//go:build bench

package bench

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func medianOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration{}, ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func sumInts(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func payoffTable(p *payoff, ways []*payWay) string {
	a, b, c := ways[0], ways[1], ways[2]
	var s strings.Builder
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	row := func(metric string, f func(w *payWay) (string, float64)) {
		va, fa := f(a)
		vb, fb := f(b)
		vc, fc := f(c)
		fmt.Fprintf(&s, "| %s | %s | %s | %s | %s | %s |\n", metric, va, vb, vc, ratio(fa, fc), ratio(fb, fc))
	}
	fmt.Fprintf(&s, "\n| metric (%d apps, %d drifted bases) | (a) conventional, shared base | (b) conventional, drifted bases | (c) Brewlet | a/c | b/c |\n|---|---|---|---|---|---|\n", p.apps, p.bases)
	row("base/runtime digests under the apps", func(w *payWay) (string, float64) { return strconv.Itoa(w.baseDigests), float64(w.baseDigests) })
	row("bytes pulled to the node, all apps", func(w *payWay) (string, float64) { return mib(w.pulled), float64(w.pulled) })
	row("… of which the runtime's or bases' layers", func(w *payWay) (string, float64) { return mib(w.basePulled), float64(w.basePulled) })
	row("the apps' own layers (registry blob sizes, sum)", func(w *payWay) (string, float64) { return mib(w.appBytes), float64(w.appBytes) })
	row("node disk, all apps running", func(w *payWay) (string, float64) { return mib(w.disk), float64(w.disk) })
	row("first app on an empty node: pull+create+start", func(w *payWay) (string, float64) { return ms(w.firstStart), float64(w.firstStart) })
	row(fmt.Sprintf("new app version: pull+create+start (median of %d)", p.runs), func(w *payWay) (string, float64) {
		return ms(medianOf(w.cold)), float64(medianOf(w.cold))
	})
	row(fmt.Sprintf("new app version: … until it listens (median of %d)", p.runs), func(w *payWay) (string, float64) {
		return ms(medianOf(w.ready)), float64(medianOf(w.ready))
	})
	row("app processes: PSS, sum (MiB)", func(w *payWay) (string, float64) {
		return fmt.Sprintf("%.1f", float64(sumInts(w.memPSS))/1024), float64(sumInts(w.memPSS))
	})
	row("app process: PSS of file pages (interpreter, libraries), mean (MiB)", func(w *payWay) (string, float64) {
		return fmt.Sprintf("%.2f", float64(sumInts(w.memFile))/1024/float64(len(w.memFile))), float64(sumInts(w.memFile))
	})
	row("app process: pages shared with other processes, mean (MiB)", func(w *payWay) (string, float64) {
		return fmt.Sprintf("%.1f", float64(sumInts(w.memShared))/1024/float64(len(w.memShared))), float64(sumInts(w.memShared))
	})
	row("shims: PSS, sum (MiB)", func(w *payWay) (string, float64) {
		return fmt.Sprintf("%.1f", float64(sumInts(w.shimPSS))/1024), float64(sumInts(w.shimPSS))
	})
	row("CVE rotation: images rebuilt and pushed", func(w *payWay) (string, float64) { return strconv.Itoa(w.rotImages), float64(w.rotImages) })
	row("CVE rotation: workload digests changed", func(w *payWay) (string, float64) { return strconv.Itoa(w.rotDigests), float64(w.rotDigests) })
	row("CVE rotation: rebuild+push time (publisher)", func(w *payWay) (string, float64) { return ms(w.rotPublish), float64(w.rotPublish) })
	row("CVE rotation: bytes pushed (publisher)", func(w *payWay) (string, float64) {
		return fmt.Sprintf("%.1f KiB", float64(w.rotPushed)/1024), float64(w.rotPushed)
	})
	row("CVE rotation: bytes to the node", func(w *payWay) (string, float64) { return mib(w.rotBytes), float64(w.rotBytes) })
	row(fmt.Sprintf("CVE rotation: node wall time (pulls/install + %d restarts)", p.apps), func(w *payWay) (string, float64) {
		return ms(w.rotWall), float64(w.rotWall)
	})
	row("… of which pulls (conventional) or the install (Brewlet)", func(w *payWay) (string, float64) { return ms(w.rotFetch), float64(w.rotFetch) })
	row("… per restart: stop + remove (median)", func(w *payWay) (string, float64) {
		var both []time.Duration
		for i, d := range w.rotStopOnly {
			both = append(both, d+w.rotRemove[i])
		}
		return ms(medianOf(both)), float64(medianOf(both))
	})
	row("… per restart: create + start on the new runtime (median)", func(w *payWay) (string, float64) {
		return ms(medianOf(w.rotCreate)), float64(medianOf(w.rotCreate))
	})
	row("… restarts created while the one before was still starting", func(w *payWay) (string, float64) {
		return fmt.Sprintf("%d of %d", w.rotOverlap, len(w.rotCreate)-1), float64(w.rotOverlap)
	})
	row("restart on a settled node: create + start (median)", func(w *payWay) (string, float64) {
		return ms(medianOf(w.setCreate)), float64(medianOf(w.setCreate))
	})
	return s.String()
}

// payoffSVG draws bytes pulled, node disk, rotation bytes and rotation time per way as
// grouped bars, each group scaled to its own maximum.
func payoffSVG(p *payoff, ways []*payWay) []byte {
	groups := []struct {
		label string
		val   func(w *payWay) float64
		unit  func(v float64) string
	}{
		{"bytes pulled, all apps", func(w *payWay) float64 { return float64(w.pulled) }, func(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }},
		{"node disk, all apps", func(w *payWay) float64 { return float64(w.disk) }, func(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }},
		{"new version: pull to running", func(w *payWay) float64 { return float64(medianOf(w.cold)) }, func(v float64) string { return fmt.Sprintf("%.0f ms", v/1e6) }},
		{"CVE rotation: bytes to node", func(w *payWay) float64 { return float64(w.rotBytes) }, func(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }},
		{"CVE rotation: node wall time", func(w *payWay) float64 { return float64(w.rotWall) }, func(v float64) string { return fmt.Sprintf("%.1f s", v/1e9) }},
		{"CVE rotation: images rebuilt", func(w *payWay) float64 { return float64(w.rotImages) }, func(v float64) string { return fmt.Sprintf("%.0f", v) }},
	}
	colors := []string{"#c0504d", "#f79646", "#4f81bd"}
	const gw, bh, top = 200, 150, 50
	width := len(groups)*gw + 20
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, top+bh+90)
	fmt.Fprintf(&s, `<text x="10" y="20" font-size="14">Brewlet payoff: %d Python apps on one node (TestBenchPayoff, lower is better)</text>`+"\n", p.apps)
	for gi, g := range groups {
		maxV := 0.0
		for _, w := range ways {
			if v := g.val(w); v > maxV {
				maxV = v
			}
		}
		x0 := 20 + gi*gw
		for wi, w := range ways {
			v := g.val(w)
			h := 0.0
			if maxV > 0 {
				h = v / maxV * bh
			}
			x := x0 + 10 + wi*55
			fmt.Fprintf(&s, `<rect x="%d" y="%.1f" width="45" height="%.1f" fill="%s"/>`+"\n", x, top+bh-h, h, colors[wi])
			fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", x+22, top+bh-h-3, g.unit(v))
		}
		fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x0+92, top+bh+16, g.label)
	}
	for wi, w := range ways {
		fmt.Fprintf(&s, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">(%s) %s</text>`+"\n", 20+wi*260, top+bh+40, colors[wi], 36+wi*260, top+bh+50, w.key, w.title)
	}
	s.WriteString("</svg>\n")
	return []byte(s.String())
}
