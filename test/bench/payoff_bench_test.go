//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/benchratio"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// TestBenchPayoff measures, on one harness node per repetition, what Brewlet is for: N
// applications with distinct code published three ways from the same sources —
//
//	(a) conventional images on one shared base (the CPython runtime image's layers + one
//	    application layer; the best case for conventional images),
//	(b) conventional images on K drifted base generations,
//	(c) Brewlet artifacts (only /app) on the CPython RuntimeImage installed once —
//
// and for each: bytes pulled to the node and disk used once all N run, the time from "image
// not on the node" to "process running" for a new application version, the memory of the
// running applications and their shims, and the CVE rotation to the interpreter's security
// update (python2 of hack/runtimes.sh); then BENCH_CONCURRENT containers created at once,
// runc against brewlet. The first repetition measures all three ways and prints their table
// (and writes docs/payoff.svg); every repetition measures (a) and (c), which goes first
// alternating, and the timing ratios of (c) over (a) are printed with their spread and
// guarded like the shim bench's (benchGuard). It asserts no timing. BENCH_REPS (6),
// BENCH_APPS (20), BENCH_BASES (5), BENCH_RUNS (5 new-version starts) and BENCH_CONCURRENT
// (20) size it; docs/benchmarks.md explains every figure.
func TestBenchPayoff(t *testing.T) {
	reps, k := envInt("BENCH_REPS", benchReps), envInt("BENCH_CONCURRENT", 20)
	var rotWall, restart, stop, remove, newVersion, p50, p99 [2][]float64 // [(a), (c)] per repetition
	var restartIDs, burstIDs []string                                     // brewlet containers, for the step profile
	var restartTotal, burstTotal []time.Duration
	steps := map[string]map[string]time.Duration{}
	var stepNames []string
	for rep := range reps {
		t.Run(fmt.Sprintf("rep%d", rep), func(t *testing.T) {
			p := newPayoff(t)
			ways := [2]*payWay{p.conventional("a", "conventional, shared base", 1), p.brewletWay()}
			order := []int{0, 1}
			if rep%2 == 1 {
				order = []int{1, 0}
			}
			var b *payWay
			if rep == 0 {
				b = p.conventional("b", fmt.Sprintf("conventional, %d drifted bases", p.bases), p.bases)
				p.measure(b)
			}
			for _, i := range order {
				p.measure(ways[i])
			}
			bursts := p.concurrent(ways, order)
			for i, w := range ways {
				rotWall[i] = append(rotWall[i], float64(w.rotWall))
				restart[i] = append(restart[i], float64(medianOf(w.setCreate)))
				stop[i] = append(stop[i], float64(medianOf(w.rotStopOnly)))
				remove[i] = append(remove[i], float64(medianOf(w.rotRemove)))
				newVersion[i] = append(newVersion[i], float64(medianOf(w.cold)))
				p50[i] = append(p50[i], float64(percentile(bursts[i].lat, 0.5)))
				p99[i] = append(p99[i], float64(percentile(bursts[i].lat, 0.99)))
			}
			restartIDs, restartTotal = append(restartIDs, ways[1].setIDs...), append(restartTotal, ways[1].setCreate...)
			burstIDs, burstTotal = append(burstIDs, bursts[1].ids...), append(burstTotal, bursts[1].lat...)
			byID, names := shimSteps(t, p.d.N.Containerd.LogPath)
			for id, st := range byID {
				steps[id] = st
			}
			stepNames = names
			if rep == 0 {
				table := payoffTable(p, []*payWay{ways[0], b, ways[1]})
				t.Log(table)
				fmt.Print(table)
				if err := os.WriteFile(filepath.Join(framework.RepoRoot(t), "docs", "payoff.svg"), payoffSVG(p, []*payWay{ways[0], b, ways[1]}), 0o644); err != nil {
					t.Errorf("write the plot: %v", err)
				}
			}
		})
	}
	apps := envInt("BENCH_APPS", 20)
	benchGuard(t, fmt.Sprintf("payoff, (c) Brewlet over (a) conventional (%d apps, %d repetitions)", apps, reps), []benchratio.Row{
		ratioRow(fmt.Sprintf("payoff: CVE rotation on the node (install or pulls + %d restarts)", apps), rotWall, dur, "≤ 0.85×"),
		ratioRow("payoff: restart on a settled node, create+start (median)", restart, dur, "≤ 1.0×"),
		ratioRow("payoff: restart, stop+remove, stop (median)", stop, dur, "–"),
		ratioRow("payoff: restart, stop+remove, remove (median)", remove, dur, "–"),
		ratioRow("payoff: new app version, pull+create+start (median)", newVersion, dur, "–"),
		ratioRow(fmt.Sprintf("payoff: %d creates at once, p50", k), p50, dur, "≤ 1.1×"),
		ratioRow(fmt.Sprintf("payoff: %d creates at once, p99", k), p99, dur, "≤ 1.1×"),
	})
	prof := stepTable(steps, stepNames, append([]stepColumn{{fmt.Sprintf("restarts on a settled node (median of %d)", len(restartIDs)), restartIDs, restartTotal, 0.5}},
		burstColumns(k, burstIDs, burstTotal)...)...)
	t.Log(prof)
	fmt.Print(prof)
}

type payoff struct {
	t                   *testing.T
	d                   *kit.DataPath // node, runtime refs, installer, CLI
	apps, bases, runs   int
	py1, py2            v1.Image
	installed           *countingTransport // every byte the installer reads from the registry
	pushed              *countingTransport // every byte the publisher sends (conventional pushes)
	contentDir, snapDir string
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func newPayoff(t *testing.T) *payoff {
	// Every brewlet create logs its steps (the step profile); the line costs microseconds.
	n := framework.StartNodeWith(t, framework.NodeOptions{ShimEnv: []string{vocab.EnvSlowLaunch + "=0s"}})
	p := &payoff{t: t, apps: envInt("BENCH_APPS", 20), bases: envInt("BENCH_BASES", 5), runs: envInt("BENCH_RUNS", 5),
		installed: newCountingTransport(t), pushed: newCountingTransport(t),
		contentDir: filepath.Join(n.Dir, "root", "io.containerd.content.v1.content"),
		snapDir:    filepath.Join(n.Dir, "root", "io.containerd.snapshotter.v1.overlayfs")}
	d := &kit.DataPath{N: n, Host: hoststate.Under(n.HostPrefix), Epoch: "5b0d1c2e-3f4a-4b5c-8d6e-7f8091a2b3c4"}
	d.Refs = kit.BuildRuntimes(t, n.Registry, "python")
	d.Inst = &install.Installer{Layout: d.Host, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"},
		Remote: []remote.Option{remote.WithTransport(p.installed)}}
	d.CLI = kit.BuildCLI(t)
	p.d = d
	p.py1, p.py2 = p.remoteImage(d.Refs["python1"]), p.remoteImage(d.Refs["python2"])
	// containerd pulls the pinned sandbox image at the first pod: before any baseline.
	if err := n.Pull(context.Background(), n.PauseImage, nil); err != nil {
		t.Fatal(err)
	}
	return p
}
