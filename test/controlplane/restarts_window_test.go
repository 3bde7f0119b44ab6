package controlplane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/kit"
)

// A restart window that opens a minute or two from now: after the rotation completes, the
// opted-in workload waits (Pending, OutsideRestartWindow, the opening time named), across
// an operator restart too; once the window opens it is restarted and succeeds.
func TestRotationRestartsWaitForTheWindow(t *testing.T) {
	// The window's minute starts at least 40 s from now, so the rotation completes before it.
	opens := time.Now().UTC().Add(40 * time.Second).Truncate(time.Minute).Add(time.Minute)
	schedule := fmt.Sprintf("%d %d * * *", opens.Minute(), opens.Hour())
	w := startRestartWorld(t, 1, 2*time.Minute, "--rotation-restart-window="+schedule,
		"--rotation-restart-window-duration=30m", "--rotation-restart-window-time-zone=UTC")
	ctx, c := context.Background(), w.cp.Client
	epoch := w.approve(t)
	kit.Must(t, c.Create(ctx, restartDeployment("web", true)))
	w.waitRunning(t, 2)
	w.report(t, 1, epoch)
	w.rotate(t, 2, 2)
	report := func() { w.reportState(t, 2, epoch, vocab.StateReady) }
	w.follow(t, report, "Deployment/web=Pending")
	check := func() {
		t.Helper()
		if time.Now().After(opens) {
			t.Fatalf("the machine was too slow: the window opened at %s before the hold could be seen", opens)
		}
		r := getRI(t, c, "python").Status.Rotation.Restarts
		if len(r) != 1 || r[0].Reason != string(vocab.ReasonOutsideRestartWindow) || !strings.Contains(r[0].Message, opens.Format(time.RFC3339)) {
			t.Fatalf("waiting record %+v, want OutsideRestartWindow naming %s", r, opens.Format(time.RFC3339))
		}
	}
	check()
	// The window is the clock's: a new operator process holds the same.
	w.op.Stop()
	w.op = w.start()
	report()
	time.Sleep(3 * time.Second)
	check()
	w.follow(t, report, "Deployment/web=Succeeded")
	if time.Now().Before(opens) {
		t.Fatalf("restarted before the window opened at %s", opens)
	}

	// Inside the window, the fleet pause on RuntimeClass brewlet holds the next rotation's
	// restart; lifting it lets the restart go.
	// (The operator created the object at its start: without it every rotation is held.)
	rc := &nodev1.RuntimeClass{}
	kit.Must(t, c.Get(ctx, client.ObjectKey{Name: vocab.RuntimeClassName}, rc))
	base0 := client.MergeFrom(rc.DeepCopy())
	metav1.SetMetaDataAnnotation(&rc.ObjectMeta, vocab.AnnotationRotationsPaused, "true")
	kit.Must(t, c.Patch(ctx, rc, base0))
	w.rotate(t, 3, 3)
	report3 := func() { w.reportState(t, 3, epoch, vocab.StateReady) }
	w.follow(t, report3, "Deployment/web=Pending")
	if r := getRI(t, c, "python").Status.Rotation.Restarts; len(r) != 1 || r[0].Reason != string(vocab.ReasonRotationPaused) ||
		!strings.Contains(r[0].Message, vocab.AnnotationRotationsPaused) {
		t.Fatalf("held by the fleet pause: %+v", r)
	}
	base := client.MergeFrom(rc.DeepCopy())
	delete(rc.Annotations, vocab.AnnotationRotationsPaused)
	kit.Must(t, c.Patch(ctx, rc, base))
	w.follow(t, report3, "Deployment/web=Succeeded")
}
