package fleetpause

import (
	"strings"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	on, off := rc("brewlet", map[string]string{key: "true"}), rc("brewlet", nil)
	if !Changes.Update(event.UpdateEvent{ObjectOld: off, ObjectNew: on}) || Changes.Update(event.UpdateEvent{ObjectOld: on, ObjectNew: on}) ||
		!Changes.Delete(event.DeleteEvent{Object: on}) || Changes.Create(event.CreateEvent{Object: off}) {
		t.Error("the predicate passes the wrong events")
	}
}
