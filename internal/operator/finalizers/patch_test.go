package finalizers

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

func TestPatchSendsOnlyFinalizersAndConflictsWhenStale(t *testing.T) {
	s := runtime.NewScheme()
	if err := brewletv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	ri := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "py"},
		Spec: brewletv1.RuntimeImageSpec{Source: brewletv1.RuntimeImageSource{Image: "reg/py@sha256:1"}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(ri).Build()
	ctx := context.Background()
	var cached brewletv1.RuntimeImage
	if err := c.Get(ctx, client.ObjectKeyFromObject(ri), &cached); err != nil {
		t.Fatal(err)
	}
	// An administrator changes the spec after the operator's cache read it.
	var admin brewletv1.RuntimeImage
	if err := c.Get(ctx, client.ObjectKeyFromObject(ri), &admin); err != nil {
		t.Fatal(err)
	}
	admin.Spec.Source.Image = "reg/py@sha256:2"
	if err := c.Update(ctx, &admin); err != nil {
		t.Fatal(err)
	}
	stale := cached.DeepCopy()
	err := Patch(ctx, c, stale, func() { controllerutil.AddFinalizer(stale, "brewlet.sh/test") })
	if !apierrors.IsConflict(err) {
		t.Fatalf("patch from a stale copy: %v, want a conflict", err)
	}
	var fresh brewletv1.RuntimeImage
	if err := c.Get(ctx, client.ObjectKeyFromObject(ri), &fresh); err != nil {
		t.Fatal(err)
	}
	// The spec in fresh is the administrator's; a changed spec in the copy is never sent.
	fresh.Spec.Source.Image = "local edit that must not be written"
	if err := Patch(ctx, c, &fresh, func() { controllerutil.AddFinalizer(&fresh, "brewlet.sh/test") }); err != nil {
		t.Fatal(err)
	}
	var got brewletv1.RuntimeImage
	if err := c.Get(ctx, client.ObjectKeyFromObject(ri), &got); err != nil {
		t.Fatal(err)
	}
	if !controllerutil.ContainsFinalizer(&got, "brewlet.sh/test") || got.Spec.Source.Image != "reg/py@sha256:2" {
		t.Fatalf("stored %v %q: want the finalizer added and the administrator's spec kept", got.Finalizers, got.Spec.Source.Image)
	}
}
