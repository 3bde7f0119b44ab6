package fleetpause

import (
	"context"
	"strings"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"brewlet.sh/brewlet/internal/vocab"
)

func rc(name string, ann map[string]string) *nodev1.RuntimeClass {
	return &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}
}

func TestOf(t *testing.T) {
	key := vocab.AnnotationRotationsPaused
	for _, tc := range []struct {
		name   string
		rc     *nodev1.RuntimeClass
		paused bool
	}{
		{"none", rc("brewlet", nil), false},
		{"true", rc("brewlet", map[string]string{key: "true"}), true},
		{"false", rc("brewlet", map[string]string{key: "false"}), false},
		{"a mistyped value pauses", rc("brewlet", map[string]string{key: "ture"}), true},
		{"empty pauses", rc("brewlet", map[string]string{key: ""}), true},
		{"another RuntimeClass", rc("runc", map[string]string{key: "true"}), false},
		{"no RuntimeClass", nil, false},
	} {
		msg := Of(tc.rc)
		if (msg != "") != tc.paused {
			t.Errorf("%s: %q", tc.name, msg)
		}
		if msg != "" && !strings.Contains(msg, "kubectl annotate runtimeclass brewlet "+key+"-") {
			t.Errorf("%s: the message says not how to resume: %q", tc.name, msg)
		}
	}
	// A missing RuntimeClass brewlet holds rotations, so its creation and deletion are changes
	// whatever it carries; another RuntimeClass never is.
	on, off, other := rc("brewlet", map[string]string{key: "true"}), rc("brewlet", nil), rc("runc", map[string]string{key: "true"})
	if !Changes.Update(event.UpdateEvent{ObjectOld: off, ObjectNew: on}) || Changes.Update(event.UpdateEvent{ObjectOld: on, ObjectNew: on}) ||
		!Changes.Delete(event.DeleteEvent{Object: on}) || !Changes.Delete(event.DeleteEvent{Object: off}) ||
		!Changes.Create(event.CreateEvent{Object: off}) || !Changes.Create(event.CreateEvent{Object: on}) ||
		Changes.Create(event.CreateEvent{Object: other}) || Changes.Delete(event.DeleteEvent{Object: other}) {
		t.Error("the predicate passes the wrong events")
	}
}

// Read fails closed: without RuntimeClass brewlet, the object that carries the pause, every
// rotation is held until the operator has recreated it.
func TestReadHoldsWhileTheRuntimeClassIsMissing(t *testing.T) {
	s := runtime.NewScheme()
	if err := nodev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		objects []client.Object
		want    string
	}{
		{"missing", nil, Missing},
		{"only another RuntimeClass", []client.Object{rc("runc", nil)}, Missing},
		{"present, no pause", []client.Object{rc("brewlet", nil)}, ""},
		{"present, paused", []client.Object{rc("brewlet", map[string]string{vocab.AnnotationRotationsPaused: "true"})}, Of(rc("brewlet", map[string]string{vocab.AnnotationRotationsPaused: "true"}))},
	} {
		got, err := Read(ctx, fake.NewClientBuilder().WithScheme(s).WithObjects(tc.objects...).Build())
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	if !strings.Contains(Missing, "does not exist") || !strings.Contains(Missing, "held") {
		t.Errorf("the message says neither what is missing nor what it does: %q", Missing)
	}
}
