package runtimeclass

import (
	"context"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"brewlet.sh/brewlet/internal/vocab"
)

func TestDecide(t *testing.T) {
	good := func() *nodev1.RuntimeClass {
		return &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: vocab.RuntimeClassName}, Handler: vocab.RuntimeClassName, Scheduling: Scheduling()}
	}
	wrongHandler, noScheduling, moreSelectors, paused := good(), good(), good(), good()
	wrongHandler.Handler = "runc"
	noScheduling.Scheduling = nil
	moreSelectors.Scheduling.NodeSelector["pool"] = "a"
	paused.Annotations = map[string]string{vocab.AnnotationRotationsPaused: "true"}
	for _, tc := range []struct {
		name string
		rc   *nodev1.RuntimeClass
		want Action
	}{
		{"missing", nil, Create},
		{"as it must be", good(), Keep},
		{"paused: the pause is not ours to touch", paused, Keep},
		{"another handler", wrongHandler, Replace},
		{"no scheduling", noScheduling, Update},
		{"scheduling edited", moreSelectors, Update},
	} {
		if got := Decide(tc.rc); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The object is created while missing, and comes back with the pause it last carried
// after someone deletes it or it is replaced for a wrong handler.
func TestReconcileKeepsTheObjectAndItsPause(t *testing.T) {
	s := runtime.NewScheme()
	if err := nodev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(s).Build()
	r := &Reconciler{Client: c}
	get := func() *nodev1.RuntimeClass {
		t.Helper()
		rc := &nodev1.RuntimeClass{}
		if err := c.Get(ctx, client.ObjectKey{Name: vocab.RuntimeClassName}, rc); err != nil {
			t.Fatal(err)
		}
		return rc
	}
	pass := func() error { _, err := r.Reconcile(ctx, request); return err }

	if err := pass(); err != nil {
		t.Fatal(err)
	}
	rc := get()
	if Decide(rc) != Keep || rc.Annotations[vocab.AnnotationRotationsPaused] != "" {
		t.Fatalf("created %+v", rc)
	}

	// Paused, then deleted: recreated paused.
	rc.Annotations = map[string]string{vocab.AnnotationRotationsPaused: "true"}
	if err := c.Update(ctx, rc); err != nil {
		t.Fatal(err)
	}
	if err := pass(); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, rc); err != nil {
		t.Fatal(err)
	}
	if err := pass(); err != nil {
		t.Fatal(err)
	}
	if rc = get(); rc.Annotations[vocab.AnnotationRotationsPaused] != "true" {
		t.Fatalf("recreated without the pause: %+v", rc.Annotations)
	}

	// Scheduling edited: repaired in place, pause kept.
	rc.Scheduling = nil
	if err := c.Update(ctx, rc); err != nil {
		t.Fatal(err)
	}
	if err := pass(); err != nil {
		t.Fatal(err)
	}
	if rc = get(); Decide(rc) != Keep || rc.Annotations[vocab.AnnotationRotationsPaused] != "true" {
		t.Fatalf("repaired %+v", rc)
	}

	// Another handler (immutable): replaced, pause kept.
	if err := c.Delete(ctx, rc); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: vocab.RuntimeClassName,
		Annotations: map[string]string{vocab.AnnotationRotationsPaused: "until-friday"}}, Handler: "runc"}); err != nil {
		t.Fatal(err)
	}
	if err := pass(); err == nil {
		t.Fatal("a replaced object reports nothing")
	}
	if err := pass(); err != nil {
		t.Fatal(err)
	}
	if rc = get(); Decide(rc) != Keep || rc.Annotations[vocab.AnnotationRotationsPaused] != "until-friday" {
		t.Fatalf("replaced %+v", rc)
	}
}
