package nodeprofile

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

func TestReconcile(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = brewletv1.AddToScheme(s)
	p := prof("p", 1, []string{"general"}, "py")
	p.Spec.ContainerdRestart = "none"
	a, b := node("a", "general"), node("b", "general")
	// The agent of b created its NodeRuntime first, with a status of its own.
	agentMade := nrt("b", ready("py", 1))
	var writes atomic.Int32
	c := fake.NewClientBuilder().WithScheme(s).
		WithStatusSubresource(&brewletv1.NodeProfile{}, &brewletv1.NodeRuntime{}, &brewletv1.RuntimeImage{}).
		WithObjects(&p, &a, &b, img("py", 1), agentMade).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
				writes.Add(1)
				return c.Create(ctx, o, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
				writes.Add(1)
				return c.Update(ctx, o, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
				writes.Add(1)
				return c.SubResource(sub).Update(ctx, o, opts...)
			},
		}).Build()
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, Recorder: rec, Now: func() metav1.Time { return now }}
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}}
	// The first pass only adds the cleanup finalizer, before any node is served.
	if res, err := r.Reconcile(ctx, req); err != nil || !res.IsZero() {
		t.Fatalf("first pass: %+v %v", res, err)
	}
	if err := c.Get(ctx, types.NamespacedName{Name: "a"}, &brewletv1.NodeRuntime{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a node served before the finalizer: %v", err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		got := &brewletv1.NodeRuntime{}
		if err := c.Get(ctx, types.NamespacedName{Name: n}, got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.ContainerdRestart != "none" || len(got.Spec.Runtimes) != 1 || got.Spec.Runtimes[0].ID != "py" {
			t.Fatalf("NodeRuntime %s spec %+v", n, got.Spec)
		}
		if n == "a" && (len(got.OwnerReferences) != 1 || got.OwnerReferences[0].Kind != "Node" || got.OwnerReferences[0].UID != a.UID) {
			t.Fatalf("created NodeRuntime a lacks the Node owner: %+v", got.OwnerReferences)
		}
		if n == "b" && len(got.Status.Runtimes) != 1 {
			t.Fatalf("the agent's status of b was lost: %+v", got.Status)
		}
	}
	got := &brewletv1.NodeProfile{}
	if err := c.Get(ctx, types.NamespacedName{Name: "p"}, got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Finalizers, []string{vocab.FinalizerCleanup}) || len(got.Status.Ledger) != 2 {
		t.Fatalf("finalizers %v, ledger %+v", got.Finalizers, got.Status.Ledger)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, string(vocab.ConditionReady))
	if got.Status.AssignedNodes != 2 || got.Status.ReadyNodes != 1 || cond == nil || cond.Reason != string(vocab.ReasonNodesNotReady) {
		t.Fatalf("status %+v", got.Status)
	}
	if ev := <-rec.Events; ev != corev1.EventTypeNormal+" "+string(vocab.ReasonNodesNotReady)+" 1 of 2 node(s) report every Eager runtime Ready" {
		t.Fatalf("event %q", ev)
	}
	// A pass over an unchanged cluster writes nothing and records nothing.
	before := writes.Load()
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if w := writes.Load() - before; w != 0 || len(rec.Events) != 0 {
		t.Fatalf("an unchanged pass wrote %d times, recorded %d events", w, len(rec.Events))
	}
}
