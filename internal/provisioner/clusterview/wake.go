package clusterview

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// Wakeup watches what should make the agent act before its next periodic pass: a change of
// its node's NodeRuntime spec (an ID offered or dropped, a wave allowing a new generation, a
// quarantine). The View's RuntimeImage informer adds a runtime being approved, revoked or
// given a new generation. Other changes (rotation counts, task observations, other nodes'
// objects) wake nothing: a fleet's reports must not wake every agent. The periodic pass
// stays the source of truth; a lost watch only delays.
type Wakeup struct {
	Client   client.WithWatch
	NodeName string
	Log      func(format string, args ...any)
}

// Run sends on wake (without blocking) on every relevant change until ctx ends, re-watching
// after errors.
func (w Wakeup) Run(ctx context.Context, wake chan<- struct{}) {
	w.loop(ctx, wake, &brewletv1.NodeRuntimeList{}, []client.ListOption{client.MatchingFields{"metadata.name": w.NodeName}}, nodeRuntimeKey)
}

// nodeRuntimeKey changes with the spec only (metadata.generation: status is a subresource).
func nodeRuntimeKey(o any) (string, any, bool) {
	n, ok := o.(*brewletv1.NodeRuntime)
	if !ok {
		return "", nil, false
	}
	return n.Name, n.Generation, true
}

// runtimeImageKey changes with what authorizations depend on: the kill switch and a
// deletion under way (read by the node itself, so revocation needs no operator), approval,
// epoch, generation.
func runtimeImageKey(o any) (string, any, bool) {
	ri, ok := o.(*brewletv1.RuntimeImage)
	if !ok {
		return "", nil, false
	}
	type key struct {
		Revoked    bool
		Deleting   bool
		Approved   bool
		Epoch      string
		Generation int64
	}
	return ri.Name, key{ri.Spec.Revoked, ri.DeletionTimestamp != nil, meta.IsStatusConditionTrue(ri.Status.Conditions, string(vocab.ConditionApproved)),
		string(ri.Status.Epoch), ri.Status.Generation}, true
}

func (w Wakeup) loop(ctx context.Context, wake chan<- struct{}, list client.ObjectList, opts []client.ListOption, key func(any) (string, any, bool)) {
	seen := map[string]any{}
	for ctx.Err() == nil {
		opened := time.Now()
		wi, err := w.Client.Watch(ctx, list, opts...)
		if err != nil {
			w.logf("watch for changes: %v (retrying; periodic passes continue)", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Second):
			}
			continue
		}
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error || ev.Type == watch.Bookmark {
				continue
			}
			name, k, ok := key(ev.Object)
			if !ok {
				continue
			}
			old, known := seen[name]
			if ev.Type == watch.Deleted {
				delete(seen, name)
			} else {
				seen[name] = k
			}
			// The first sight after (re)connecting is the state the periodic pass already
			// reads; only a difference from what was seen is news.
			if known && (ev.Type == watch.Deleted || old != k) {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}
		wi.Stop()
		// A watch the API server ends at once (overloaded, a proxy) is not re-opened in a
		// tight loop: each reconnect replays every object.
		if time.Since(opened) < 10*time.Second {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Second):
			}
		}
	}
}

func (w Wakeup) logf(format string, args ...any) {
	if w.Log != nil {
		w.Log(format, args...)
	}
}
