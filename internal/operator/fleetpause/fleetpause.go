// Package fleetpause reads the pause of every rotation at once: the annotation
// brewlet.sh/rotations-paused on RuntimeClass brewlet, the one cluster-scoped object every
// Brewlet installation has. While it is set, no node is allowed a newer generation of any
// RuntimeImage and no workload restart starts, as spec.paused does for one RuntimeImage;
// what runs finishes, and authorization is untouched.
package fleetpause

import (
	"context"
	"fmt"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// Of is the fleet pause a RuntimeClass carries: "" when none, else the message that says
// what holds the rotations and how to resume. Any value but "false" pauses: a mistyped
// value holds rotations rather than letting them run unexpectedly.
func Of(rc *nodev1.RuntimeClass) string {
	if rc == nil || rc.Name != vocab.RuntimeClassName {
		return ""
	}
	v, ok := rc.Annotations[vocab.AnnotationRotationsPaused]
	if !ok || v == "false" {
		return ""
	}
	return fmt.Sprintf("RuntimeClass %s has %s=%q, which pauses every rotation: no further node is allowed a newer generation and no workload restart starts; "+
		"resume with: kubectl annotate runtimeclass %s %s-", vocab.RuntimeClassName, vocab.AnnotationRotationsPaused, v, vocab.RuntimeClassName, vocab.AnnotationRotationsPaused)
}

// Missing is the fleet pause while RuntimeClass brewlet does not exist: the object that
// carries the pause is gone, so whether rotations may go is unknown until brewlet-operator
// has recreated it (with the pause it last saw there), and they are held meanwhile.
var Missing = fmt.Sprintf("RuntimeClass %s, which carries the pause of every rotation (%s), does not exist: every rotation is held until brewlet-operator recreates it (it does as soon as it leads; check that it runs: kubectl -n brewlet-system get pods)",
	vocab.RuntimeClassName, vocab.AnnotationRotationsPaused)

// Read returns the fleet pause through c (the manager's cache); a missing RuntimeClass holds
// every rotation (Missing) rather than letting them go: a pause someone set must not vanish
// with the object.
func Read(ctx context.Context, c client.Reader) (string, error) {
	rc := &nodev1.RuntimeClass{}
	if err := c.Get(ctx, client.ObjectKey{Name: vocab.RuntimeClassName}, rc); err != nil {
		if apierrors.IsNotFound(err) {
			return Missing, nil
		}
		return "", fmt.Errorf("read the fleet pause on RuntimeClass %s: %w", vocab.RuntimeClassName, err)
	}
	return Of(rc), nil
}

// Changes passes the RuntimeClass events that set, change or lift the fleet pause: every
// creation and deletion of RuntimeClass brewlet (a missing one holds rotations), and updates
// that change its pause.
var Changes = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return isBrewlet(e.Object) },
	DeleteFunc:  func(e event.DeleteEvent) bool { return isBrewlet(e.Object) },
	UpdateFunc:  func(e event.UpdateEvent) bool { return Of(asRC(e.ObjectOld)) != Of(asRC(e.ObjectNew)) },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func isBrewlet(o client.Object) bool { return o != nil && o.GetName() == vocab.RuntimeClassName }

func asRC(o client.Object) *nodev1.RuntimeClass {
	rc, _ := o.(*nodev1.RuntimeClass)
	return rc
}

// EveryRuntimeImage maps a fleet pause change to every RuntimeImage (from the cache).
func EveryRuntimeImage(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var ris brewletv1.RuntimeImageList
		if err := c.List(ctx, &ris, client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(ris.Items))
		for _, ri := range ris.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: ri.Name}})
		}
		return out
	})
}
