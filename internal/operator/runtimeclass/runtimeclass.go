// Package runtimeclass keeps RuntimeClass brewlet: handler brewlet, pods scheduled only
// onto nodes whose agent labelled them ready. It runs whether or not any NodeProfile
// exists, because the object also carries the fleet pause (package fleetpause), which
// holds every rotation while the object is missing: an operator that created it only from
// a profile's pass would leave a cluster without profiles paused for good.
package runtimeclass

import (
	"context"
	"fmt"
	"sync"

	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"brewlet.sh/brewlet/internal/vocab"
)

// ControllerName names the controller in logs and controller-runtime's metrics.
const ControllerName = "runtimeclass"

// Scheduling is what RuntimeClass brewlet must say: only nodes whose agent labelled them
// ready take its pods.
func Scheduling() *nodev1.Scheduling {
	return &nodev1.Scheduling{NodeSelector: map[string]string{vocab.LabelRuntime: vocab.LabelValueReady}}
}

// Action is what Decide asks of the API server.
type Action int

const (
	// Keep: the object is as it must be.
	Keep Action = iota
	// Create the object (it is missing).
	Create
	// Update its scheduling (handler right, scheduling edited).
	Update
	// Replace it: the handler is immutable, so the object is deleted and created again.
	Replace
)

// Decide says what to do with the RuntimeClass found (nil: missing). Only handler and
// scheduling are owned; other fields (overhead, labels, the fleet pause) are left as found.
func Decide(rc *nodev1.RuntimeClass) Action {
	switch {
	case rc == nil:
		return Create
	case rc.Handler != vocab.RuntimeClassName:
		return Replace
	case !equality.Semantic.DeepEqual(rc.Scheduling, Scheduling()):
		return Update
	}
	return Keep
}

// Reconciler keeps the object. It remembers the fleet pause the object last carried, so
// that an object it replaces, or one someone deleted, comes back with the same pause
// rather than letting every rotation go. An operator started while the object was missing
// has seen no pause and creates it without one (docs/operations.md says so).
type Reconciler struct {
	Client client.Client

	mu        sync.Mutex
	lastPause string
}

// Reconcile brings RuntimeClass brewlet to what Decide says; every request is for it.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	rc := &nodev1.RuntimeClass{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: vocab.RuntimeClassName}, rc)
	switch {
	case apierrors.IsNotFound(err):
		rc = nil
	case err != nil:
		return reconcile.Result{}, err
	default:
		r.mu.Lock()
		r.lastPause = rc.Annotations[vocab.AnnotationRotationsPaused]
		r.mu.Unlock()
	}
	switch Decide(rc) {
	case Create:
		rc = &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: vocab.RuntimeClassName}, Handler: vocab.RuntimeClassName, Scheduling: Scheduling()}
		r.mu.Lock()
		if r.lastPause != "" {
			rc.Annotations = map[string]string{vocab.AnnotationRotationsPaused: r.lastPause}
		}
		r.mu.Unlock()
		if err := r.Client.Create(ctx, rc); err != nil && !apierrors.IsAlreadyExists(err) {
			return reconcile.Result{}, err
		}
	case Replace:
		if err := r.Client.Delete(ctx, rc, client.Preconditions{UID: &rc.UID}); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		// The deletion's event brings the next pass, which creates it.
		return reconcile.Result{}, fmt.Errorf("RuntimeClass %s had handler %q; deleted to be recreated with handler %s", vocab.RuntimeClassName, rc.Handler, vocab.RuntimeClassName)
	case Update:
		rc.Scheduling = Scheduling()
		if err := r.Client.Update(ctx, rc); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{}, nil
}

// request is the only one there is.
var request = reconcile.Request{NamespacedName: types.NamespacedName{Name: vocab.RuntimeClassName}}

// Setup registers the controller: one pass when the operator leads (the object may be
// missing, so no informer event would bring it), then one per change of the object.
func Setup(mgr manager.Manager, skipNameValidation bool) error {
	r := &Reconciler{Client: mgr.GetClient()}
	once := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(request)
		return nil
	})
	return builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		For(&nodev1.RuntimeClass{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetName() == vocab.RuntimeClassName
		}))).
		WatchesRawSource(once).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, SkipNameValidation: &skipNameValidation}).
		Complete(r)
}
