//go:build bench

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/test/framework"
)

// TestBenchPayoff measures, on one harness node, what Brewlet is for: N applications with
// distinct code published three ways from the same sources —
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
// runc against brewlet. It prints tables and writes docs/payoff.svg; it asserts no timing.
// BENCH_APPS (20), BENCH_BASES (5), BENCH_RUNS (5 new-version starts) and BENCH_CONCURRENT
// (20) size it; docs/benchmarks.md explains every figure.
func TestBenchPayoff(t *testing.T) {
	p := newPayoff(t)
	ways := []*payWay{p.conventional("a", "conventional, shared base", 1), p.conventional("b", fmt.Sprintf("conventional, %d drifted bases", p.bases), p.bases), p.brewletWay()}
	for _, w := range ways {
		p.measure(w)
	}
	conc := p.concurrent(ways[0], ways[2])
	table := payoffTable(p, ways) + conc
	t.Log(table)
	fmt.Print(table)
	if err := os.WriteFile(filepath.Join(framework.RepoRoot(t), "docs", "payoff.svg"), payoffSVG(p, ways), 0o644); err != nil {
		t.Errorf("write the plot: %v", err)
	}
}

type payoff struct {
	t                   *testing.T
	d                   *dataPath // node, runtime refs, installer, CLI
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
	n := framework.StartNode(t)
	p := &payoff{t: t, apps: envInt("BENCH_APPS", 20), bases: envInt("BENCH_BASES", 5), runs: envInt("BENCH_RUNS", 5),
		installed: newCountingTransport(), pushed: newCountingTransport(),
		contentDir: filepath.Join(n.Dir, "root", "io.containerd.content.v1.content"),
		snapDir:    filepath.Join(n.Dir, "root", "io.containerd.snapshotter.v1.overlayfs")}
	d := &dataPath{n: n, host: hoststate.Under(n.HostPrefix), epoch: "5b0d1c2e-3f4a-4b5c-8d6e-7f8091a2b3c4"}
	d.refs = buildRuntimes(t, n.Registry, "python")
	d.inst = &install.Installer{Layout: d.host, Platform: v1.Platform{OS: "linux", Architecture: "amd64"},
		Remote: []remote.Option{remote.WithTransport(p.installed)}}
	d.cli = buildCLI(t)
	p.d = d
	p.py1, p.py2 = p.remoteImage(d.refs["python1"]), p.remoteImage(d.refs["python2"])
	// containerd pulls the pinned sandbox image at the first pod: before any baseline.
	if err := n.Pull(context.Background(), n.PauseImage, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

// --- applications -----------------------------------------------------------------------
