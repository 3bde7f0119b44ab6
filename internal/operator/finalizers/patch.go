// Package finalizers writes the operator's finalizers on objects whose other fields it may
// not change.
package finalizers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Patch sends only the finalizer change edit makes to obj, guarded by obj's resourceVersion.
// The operator may change nothing else of a RuntimeImage or NodeProfile (the admission policy
// brewlet-operator-scope, docs/security.md); a whole-object update from a cache behind the
// API server would send a stale spec back and be refused, where this ends in a conflict the
// caller retries.
func Patch(ctx context.Context, c client.Client, obj client.Object, edit func()) error {
	before, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		panic("finalizers.Patch: DeepCopyObject of a client.Object is not a client.Object")
	}
	edit()
	return c.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}
