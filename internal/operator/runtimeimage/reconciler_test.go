package runtimeimage

import (
	"context"
	"fmt"
	"sync"
	"testing"

	nodev1 "k8s.io/api/node/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/nodereports"
	"brewlet.sh/brewlet/internal/vocab"
)

type write struct {
	gen    int64
	digest string
}

// fakeAPI is controller-runtime's fake client (it enforces resourceVersion preconditions
// like the API server) with every committed status write recorded in commit order.
func fakeAPI(t *testing.T, objs ...client.Object) (client.Client, func() []write) {
	t.Helper()
	s := runtime.NewScheme()
	if err := brewletv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := nodev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var writes []write
	c := fake.NewClientBuilder().WithScheme(s).
		WithStatusSubresource(&brewletv1.RuntimeImage{}, &brewletv1.NodeRuntime{}).
		WithIndex(&brewletv1.NodeRuntime{}, nodereports.IndexRuntimeID, nodereports.RuntimeIDs).
		WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				mu.Lock() // serialize so that the record order is the commit order
				defer mu.Unlock()
				err := c.SubResource(sub).Update(ctx, obj, opts...)
				if ri, ok := obj.(*brewletv1.RuntimeImage); ok && err == nil {
					writes = append(writes, write{ri.Status.Generation, ri.Status.Digest})
				}
				return err
			},
		}).Build()
	return c, func() []write { mu.Lock(); defer mu.Unlock(); return append([]write(nil), writes...) }
}

func newRI() *brewletv1.RuntimeImage {
	return &brewletv1.RuntimeImage{
		ObjectMeta: metav1.ObjectMeta{Name: "python-3.12", UID: uid},
		Spec: brewletv1.RuntimeImageSpec{Source: brewletv1.RuntimeImageSource{Image: repo + dA},
			User: brewletv1.RuntimeUser{UID: 1000, GID: 1000}},
	}
}

var req = reconcile.Request{NamespacedName: types.NamespacedName{Name: "python-3.12"}}

// Several reconcilers race on one object (as two operator replicas would during a split
// brain, which leader election makes rare but cannot rule out) while the spec rotates.
// Every committed status must be derived from the status it replaced: +1 exactly when the
// digest changed, never a lost or doubled increment.
func TestReconcileConcurrentWritersKeepGenerationSequence(t *testing.T) {
	c, writes := fakeAPI(t, newRI())
	ctx := context.Background()
	first := &Reconciler{Client: c, APIReader: c}
	if _, err := first.Reconcile(ctx, req); err != nil { // generation 1 before the race
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	const reconcilers, edits = 4, 40
	stop := make(chan struct{})
	for i := 0; i < reconcilers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &Reconciler{Client: c, APIReader: c}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := r.Reconcile(ctx, req); err != nil && !apierrors.IsConflict(err) {
					t.Errorf("reconcile: %v", err)
					return
				}
			}
		}()
	}
	for i := 0; i < edits; i++ {
		for {
			cur := &brewletv1.RuntimeImage{}
			if err := c.Get(ctx, req.NamespacedName, cur); err != nil {
				t.Fatal(err)
			}
			cur.Spec.Source.Image = fmt.Sprintf("%ssha256:%064x", repo, i+1)
			err := c.Update(ctx, cur)
			if err == nil {
				break
			}
			if !apierrors.IsConflict(err) {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	r := &Reconciler{Client: c, APIReader: c}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}

	w := writes()
	if len(w) == 0 || w[0] != (write{1, dA}) {
		t.Fatalf("first status write %v; want generation 1 for %s", w[:min(1, len(w))], dA)
	}
	for i := 1; i < len(w); i++ {
		prev, cur := w[i-1], w[i]
		switch {
		case cur.digest != prev.digest && cur.gen != prev.gen+1:
			t.Fatalf("write %d: digest changed %s -> %s with generation %d -> %d; want +1", i, prev.digest, cur.digest, prev.gen, cur.gen)
		case cur.digest == prev.digest && cur.gen != prev.gen:
			t.Fatalf("write %d: generation %d -> %d without a digest change", i, prev.gen, cur.gen)
		}
	}
	final := &brewletv1.RuntimeImage{}
	if err := c.Get(ctx, req.NamespacedName, final); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("sha256:%064x", edits); final.Status.Digest != want || final.Status.Epoch != uid ||
		final.Status.ObservedGeneration != final.Generation {
		t.Fatalf("final status %+v; want digest %s, epoch %s, observedGeneration %d", final.Status, want, uid, final.Generation)
	}
	if final.Status.Generation < 2 || final.Status.Generation > edits+1 {
		t.Fatalf("final generation %d outside [2, %d]", final.Status.Generation, edits+1)
	}
	t.Logf("%d edits, %d status writes, final generation %d", edits, len(w), final.Status.Generation)
}

// A pass that finds nothing to change writes nothing (writes O(changes)).
func TestReconcileWritesOnlyOnChange(t *testing.T) {
	c, writes := fakeAPI(t, newRI())
	r := &Reconciler{Client: c, APIReader: c}
	for i := 0; i < 3; i++ {
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(writes()); n != 1 {
		t.Fatalf("%d status writes for one object that did not change; want 1", n)
	}
}

// The finalizer is released only when no node reports the epoch, and a cache that lags
// behind is checked against the API reader before releasing.
func TestReconcileFinalizer(t *testing.T) {
	ctx := context.Background()
	node := &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: brewletv1.NodeRuntimeStatus{Runtimes: []brewletv1.NodeRuntimeEntry{entry("python-3.12", uid, vocab.StateReady)}}}
	c, _ := fakeAPI(t, newRI(), node)
	empty, _ := fakeAPI(t) // a cache that has not seen n1's report yet
	r := &Reconciler{Client: c, APIReader: c}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, newRI()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	got := &brewletv1.RuntimeImage{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatalf("deleted while n1 holds the epoch: %v", err)
	}
	// Lagging cache: the decision says release, the confirming read refuses.
	lag := &Reconciler{Client: listFrom{Client: c, lists: empty}, APIReader: c}
	if _, err := lag.Reconcile(ctx, req); err == nil {
		t.Fatal("released the finalizer on a stale cache")
	}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatalf("deleted on a stale cache: %v", err)
	}
	node.Status.Runtimes[0].State = string(vocab.StateRevoked)
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, req.NamespacedName, got); !apierrors.IsNotFound(err) {
		t.Fatalf("still present after every node withdrew: %v %+v", err, got.Finalizers)
	}
}

// listFrom answers List from another client: a cache that is behind.
type listFrom struct {
	client.Client
	lists client.Client
}

func (l listFrom) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return l.lists.List(ctx, list, opts...)
}
