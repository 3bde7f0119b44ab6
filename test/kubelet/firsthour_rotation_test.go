package kubelet

// Rotation safety on the real kubelet tier (TestFirstHourOnKubelet's subtests): a digest
// that breaks the runtime's promise is refused on the node; one that keeps it but breaks the
// app is rolled back without moving a byte.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/firsthour"
	"brewlet.sh/brewlet/test/kit"
)

// python-3.11 rotated to the Node.js runtime: the node's agent compares what the new
// generation promises with what the one it serves promised and refuses it before current
// moves (RuntimePromiseBroken); the rotation's condition and a Warning event quote the diff
// (the version line first) and the app keeps answering on the generation it has. Naming that one
// digest as breaking lets the node install it (the app no longer opts in to restarts: its
// failure onto it would only roll back again, as firstHourBrokenApp proves).
func firstHourBrokenPromise(t *testing.T, f *firsthour.Flow) {
	ctx := context.Background()
	other := kit.BuildRuntimes(t, f.C.Registry, "all")["node-18-1"]
	if _, err := f.Sign(ctx, other); err != nil {
		t.Fatal(err)
	}
	_, digest, _ := strings.Cut(other, "@")
	served := func() (int64, string) {
		nrt := &brewletv1.NodeRuntime{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: f.C.NodeName}, nrt); err != nil {
			t.Fatal(err)
		}
		for _, e := range nrt.Status.Runtimes {
			if e.ID == firsthour.RuntimeID {
				return e.Generation, e.Reason
			}
		}
		return 0, ""
	}
	before, _ := served()
	ri := &brewletv1.RuntimeImage{}
	kit.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, ri); err != nil {
			return err
		}
		ri.Spec.Source.Image = other
		return f.Clients.CL.Update(ctx, ri)
	}))
	kit.Eventually(t, 3*time.Minute, "the node's refusal of another runtime family, with the diff, in the rotation's condition", func() (bool, string) {
		got := &brewletv1.RuntimeImage{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, got); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, string(vocab.ConditionRotationProgressing))
		return c != nil && got.Status.Rotation != nil && got.Status.Rotation.Nodes.Current == 0 && got.Status.Rotation.Nodes.Failed == 1 &&
			strings.Contains(c.Message, string(vocab.ReasonRuntimePromiseBroken)) && strings.Contains(c.Message, "line python removed"), fmt.Sprintf("%+v", c)
	})
	kit.Eventually(t, time.Minute, "a Warning event quoting what breaks", func() (bool, string) {
		events := &corev1.EventList{}
		if err := f.Clients.CL.List(ctx, events); err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == firsthour.RuntimeID && e.Reason == string(vocab.ReasonRuntimePromiseBroken) && strings.Contains(e.Message, "line python removed") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(events.Items))
	})
	if gen, reason := served(); gen != before || reason != string(vocab.ReasonRuntimePromiseBroken) {
		t.Fatalf("the node serves generation %d (%s); want %d kept, with RuntimePromiseBroken", gen, reason, before)
	}
	if _, err := f.Ask(ctx, "/", "hello from"); err != nil {
		t.Fatalf("the app stopped answering after a refused rotation: %v", err)
	}
	if out, err := f.Kubectl(ctx, "get", "runtimeimage", firsthour.RuntimeID, "-o", "wide"); err == nil {
		t.Logf("refused:\n%s", out)
	}

	// Accepted by name: the node installs it.
	app := &appsv1.Deployment{}
	kit.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Namespace: firsthour.AppNamespace, Name: firsthour.App}, app); err != nil {
			return err
		}
		delete(app.Annotations, vocab.AnnotationRestartOnRotation)
		return f.Clients.CL.Update(ctx, app)
	}))
	kit.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, ri); err != nil {
			return err
		}
		ri.Spec.Compatibility = &brewletv1.Compatibility{AcceptBreaking: digest}
		return f.Clients.CL.Update(ctx, ri)
	}))
	if err := f.WaitRotated(ctx, digest); err != nil {
		t.Fatalf("the accepted digest did not reach the node: %v", err)
	}
}

// python-3.11 rotated to a build of the same interpreter without the socket module the app
// imports: it keeps the promise (same version line, tools, libraries), so the node installs
// it, fetching only the one small layer that differs.
func firstHourBrokenApp(t *testing.T, f *firsthour.Flow) {
	ctx := context.Background()
	cur := &brewletv1.RuntimeImage{}
	kit.Must(t, f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, cur))
	base := cur.Spec.Source.Image
	opts := f.C.RegistryAccess().Options()
	ref, err := name.NewDigest(base)
	kit.Must(t, err)
	img, err := remote.Image(ref, opts...)
	kit.Must(t, err)
	// A whiteout of the module: the composed root has no socket.py, every other file stays.
	img = kit.WithFile(t, img, "usr/lib/python3.11/.wh.socket.py", "")
	tag, err := name.ParseReference(f.C.Registry + "/runtimes/python-nosocket:1")
	kit.Must(t, err)
	kit.Must(t, remote.Write(tag, img, opts...))
	d, err := img.Digest()
	kit.Must(t, err)
	broken := tag.Context().Digest(d.String()).String()
	if _, err := f.Sign(ctx, broken); err != nil {
		t.Fatal(err)
	}
	kit.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, cur); err != nil {
			return err
		}
		cur.Spec.Source.Image = broken
		return f.Clients.CL.Update(ctx, cur)
	}))
	if err := f.WaitRotated(ctx, d.String()); err != nil {
		t.Fatalf("a digest keeping the promise did not reach the node: %v", err)
	}
	firstHourRollback(t, f, d.String())
}

// The app's restart onto a runtime it cannot run on fails as soon as its pod crash-loops
// (PodsFailing), and the failure (the chart's budget here is 0) rolls the runtime back
// without anyone acting: a new generation serves the digest before again, the node takes it
// from the layers it has (its agent fetched nothing; TestRollbackMovesNoByte counts the
// registry requests: none), the app
// restarted back answers, and the spec's digest, still the failed one, is not assigned again.
func firstHourRollback(t *testing.T, f *firsthour.Flow, bad string) {
	ctx := context.Background()
	var rb brewletv1.Rollback
	kit.Eventually(t, 3*time.Minute, "the runtime rolled back to the digest before the failing one", func() (bool, string) {
		got := &brewletv1.RuntimeImage{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, got); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, string(vocab.ConditionRolledBack))
		r := got.Status.RollbackInEffect()
		if c == nil || c.Status != metav1.ConditionTrue || r == nil || r.Bad.Digest != bad || !strings.Contains(c.Message, firsthour.App) ||
			!strings.Contains(c.Message, "(PodsFailing)") {
			return false, fmt.Sprintf("condition %+v, rolledBack %+v", c, got.Status.RolledBack)
		}
		rb = *r
		return true, ""
	})
	if err := f.WaitRotated(ctx, rb.To.Digest); err != nil {
		t.Fatalf("the node did not serve the rollback generation: %v", err)
	}
	logs, err := f.Kubectl(ctx, "-n", firsthour.Namespace, "logs", "ds/brewlet-provisioner", "--tail=-1")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("installed %s generation %d from generation", firsthour.RuntimeID, rb.Generation)
	var line string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, want) {
			line = l
		}
	}
	if !strings.Contains(line, ": 0 layers fetched") {
		t.Fatalf("the agent's log does not say it installed generation %d from its own layers (%q):\n%s", rb.Generation, want, logs)
	}
	t.Logf("the agent: %s", line)
	kit.Eventually(t, 4*time.Minute, "the app restarted back onto the rollback generation", func() (bool, string) {
		got := &brewletv1.RuntimeImage{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, got); err != nil {
			return false, err.Error()
		}
		if got.Status.Rotation == nil || got.Status.Rotation.Target.Generation != rb.Generation {
			return false, fmt.Sprintf("rotation %+v", got.Status.Rotation)
		}
		for _, r := range got.Status.Rotation.Restarts {
			if r.Name == firsthour.App && r.Outcome == "Succeeded" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", got.Status.Rotation.Restarts)
	})
	if _, err := f.Ask(ctx, "/", "hello from"); err != nil {
		t.Fatalf("the app does not answer after the rollback: %v", err)
	}
	got := &brewletv1.RuntimeImage{}
	kit.Must(t, f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, got))
	if got.Status.Generation != rb.Generation || got.Status.Digest != rb.To.Digest {
		t.Fatalf("after the rollback the status moved to generation %d (%s); the spec still names the failed digest, which must not be assigned again", got.Status.Generation, got.Status.Digest)
	}
	if out, err := f.Kubectl(ctx, "get", "runtimeimage", firsthour.RuntimeID, "-o", "wide"); err == nil {
		t.Logf("rolled back:\n%s", out)
	}
}
