package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"brewlet.sh/brewlet/internal/provisioner/install"
)

// One install per ID at a time: a superseded install is cancelled and the next one starts
// only after it returned; another ID's install runs alongside; results are kept per request.
func TestJobsOnePerID(t *testing.T) {
	j := newJobs()
	ctx := context.Background()
	blocking := func(ctx context.Context, _ install.Request) error { <-ctx.Done(); return ctx.Err() }
	g1 := install.Request{ID: "py", Epoch: "e", Generation: 1, Image: "r/py@sha256:1"}
	g2 := g1
	g2.Generation, g2.Image = 2, "r/py@sha256:2"
	other := install.Request{ID: "jre", Epoch: "e", Generation: 1, Image: "r/jre@sha256:1"}
	if !j.start(ctx, g1, blocking) {
		t.Fatal("first install did not start")
	}
	if !j.start(ctx, other, func(context.Context, install.Request) error { return errors.New("pull failed") }) {
		t.Fatal("another ID's install waited")
	}
	if j.start(ctx, g2, blocking) {
		t.Fatal("two installs of one ID at once")
	}
	if running, _ := j.state(g1); !running {
		t.Fatal("state does not show the running install")
	}
	j.cancel("py", &g2) // g1 is superseded
	select {
	case <-j.finished:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up after an install ended")
	}
	j.wait()
	running, last := j.state(g1)
	if running || last == nil || !errors.Is(last.err, context.Canceled) {
		t.Fatalf("superseded install: running %v, last %+v", running, last)
	}
	if _, last := j.state(other); last == nil || last.err == nil {
		t.Fatalf("the other ID's result: %+v", last)
	}
	if !j.start(ctx, g2, func(context.Context, install.Request) error { return nil }) {
		t.Fatal("the new generation did not start after the old one stopped")
	}
	j.stopAll()
	if j.busy() {
		t.Fatal("installs left after stopAll")
	}
}
