package agent

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/provisioner/clusterview"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The agent's informer view is confirmed by a metadata-only quorum read each pass: while
// the informers follow the API server the pass reads them; once they stop (a watch that
// broke, events that never arrive) a pass still sees every change, through full lists.
func TestAgentViewNeverStale(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	ctx := context.Background()
	kit.Must(t, cp.Client.Create(ctx, kit.RuntimeImage("view-a", "registry.example/a@"+kit.GoodDigest)))

	viewCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	view, err := clusterview.NewView(cp.Config, framework.Scheme(), cp.Client)
	kit.Must(t, err)
	kit.Must(t, view.Start(viewCtx, make(chan struct{}, 1)))

	names := func() map[string]string {
		t.Helper()
		_, images, err := view.Read(ctx)
		kit.Must(t, err)
		out := map[string]string{}
		for _, ri := range images {
			out[ri.Name] = ri.Spec.Source.Image
			if ri.ManagedFields != nil || ri.Status.Rotation != nil || ri.Status.TaskObservations != nil {
				t.Errorf("%s: the view keeps fields the agent never reads", ri.Name)
			}
		}
		return out
	}
	if got := names(); len(got) != 1 || view.Confirmed.Load() != 1 || view.Fallbacks.Load() != 0 {
		t.Fatalf("first read: %v, confirmed %d, fallbacks %d; want view-a from the informers", got, view.Confirmed.Load(), view.Fallbacks.Load())
	}
	// A change the informers deliver: confirmed once the event arrived, never read stale.
	kit.Must(t, cp.Client.Create(ctx, kit.RuntimeImage("view-b", "registry.example/b@"+kit.GoodDigest)))
	if got := names(); len(got) != 2 {
		t.Fatalf("after creating view-b the view holds %v", got)
	}

	stopInformers()
	time.Sleep(500 * time.Millisecond) // the informers' watches have ended
	before := view.Fallbacks.Load()
	b := &brewletv1.RuntimeImage{}
	kit.Must(t, cp.Client.Get(ctx, client.ObjectKey{Name: "view-b"}, b))
	kit.Must(t, cp.Client.Delete(ctx, b))
	kit.Must(t, cp.Client.Create(ctx, kit.RuntimeImage("view-c", "registry.example/c@"+kit.GoodDigest)))
	got := names()
	if _, ok := got["view-b"]; ok || got["view-c"] == "" || len(got) != 2 {
		t.Fatalf("with the informers stopped the view served %v; want view-a and view-c", got)
	}
	if view.Fallbacks.Load() != before+1 {
		t.Fatalf("fallbacks %d → %d: the stale informers were not detected", before, view.Fallbacks.Load())
	}
}
