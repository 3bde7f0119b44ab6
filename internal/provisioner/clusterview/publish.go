package clusterview

import (
	"context"
	"fmt"
	"reflect"

	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// Cluster is one node agent's connection to the API server: what it reads each pass (its
// Node, the profiles and runtime images) and what it publishes (its Node's Brewlet labels and
// its NodeRuntime status). Every read is a quorum read, or informers a quorum read confirmed
// (View), so an authorization renewed from them counts from the moment the read began.
type Cluster struct {
	Client   client.Client // uncached: reads are quorum reads
	View     *View         // nil: full quorum lists every pass
	NodeName string
}

// Node reads the node's metadata (its labels choose the profile; its UID owns the
// NodeRuntime): metadata only, so a node's image list and status never travel each pass.
func (c Cluster) Node(ctx context.Context) (*corev1.Node, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := c.Client.Get(ctx, client.ObjectKey{Name: c.NodeName}, m); err != nil {
		return nil, fmt.Errorf("read node %s: %w", c.NodeName, err)
	}
	return &corev1.Node{ObjectMeta: m.ObjectMeta}, nil
}

// Directives returns every NodeProfile and RuntimeImage as the API server holds them now.
func (c Cluster) Directives(ctx context.Context) ([]brewletv1.NodeProfile, []brewletv1.RuntimeImage, error) {
	if c.View != nil {
		return c.View.Read(ctx)
	}
	return ListDirect(ctx, c.Client)
}

// NodeRuntime returns the node's NodeRuntime, creating it (owned by the Node) if needed.
func (c Cluster) NodeRuntime(ctx context.Context, node *corev1.Node) (*brewletv1.NodeRuntime, error) {
	nrt := &brewletv1.NodeRuntime{}
	err := c.Client.Get(ctx, client.ObjectKey{Name: c.NodeName}, nrt)
	if apierrors.IsNotFound(err) {
		ctrl := true
		nrt = &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: c.NodeName,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: &ctrl}}}}
		err = c.Client.Create(ctx, nrt)
		if apierrors.IsAlreadyExists(err) {
			// brewlet-operator creates it too (to write spec before the agent ever ran),
			// with the same name and owner: whichever is first, the other reads it.
			nrt = &brewletv1.NodeRuntime{}
			err = c.Client.Get(ctx, client.ObjectKey{Name: c.NodeName}, nrt)
		}
	}
	return nrt, err
}

// PublishLabels makes the node's Brewlet labels (vocab.OwnNodeLabel) exactly want,
// touching no other label: Brewlet labels not in want, the legacy runtime keys among them,
// are removed. Nothing is written when nothing changes.
func (c Cluster) PublishLabels(ctx context.Context, node *corev1.Node, want map[string]string) error {
	patch := client.MergeFrom(node.DeepCopy())
	changed := false
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for k, v := range node.Labels {
		if vocab.OwnNodeLabel(k) && want[k] != v {
			if w, ok := want[k]; ok {
				node.Labels[k] = w
			} else {
				delete(node.Labels, k)
			}
			changed = true
		}
	}
	for k, v := range want {
		if node.Labels[k] != v {
			node.Labels[k] = v
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return c.Client.Patch(ctx, node, patch)
}

// PublishStatus writes st as the NodeRuntime's status when it differs from the one
// published beyond what every renewal changes (observedAt, authorizedUntil): a healthy node
// does not write each pass.
func (c Cluster) PublishStatus(ctx context.Context, nrt *brewletv1.NodeRuntime, st brewletv1.NodeRuntimeStatus) error {
	// The operator writes this object's spec while the pass runs: on a conflict the status
	// (this agent's alone) is applied again to the object as it is now.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		old := nrt.Status
		old.ObservedAt = nil
		if reflect.DeepEqual(normalize(old), normalize(st)) && !untilStale(old, st, time.Now()) {
			return nil
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		st.ObservedAt = &now
		nrt.Status = st
		err := c.Client.Status().Update(ctx, nrt)
		if apierrors.IsConflict(err) {
			if gerr := c.Client.Get(ctx, client.ObjectKeyFromObject(nrt), nrt); gerr != nil {
				return gerr
			}
		}
		return err
	})
}

// untilStale reports whether a published authorizedUntil must be renewed: it is a lower
// bound a reader may trust (the node's authorization holds at least until then), so it is
// written again once less than half of the new authorization's remaining life is left in
// it. A node then writes its status for renewals once per half authorization TTL, not
// every pass, and the published value is never in the past while the node is authorized.
func untilStale(old, st brewletv1.NodeRuntimeStatus, now time.Time) bool {
	published := map[string]*metav1.Time{}
	for _, r := range old.Runtimes {
		published[r.ID] = r.AuthorizedUntil
	}
	for _, r := range st.Runtimes {
		if r.AuthorizedUntil == nil {
			continue
		}
		p := published[r.ID]
		if p == nil || p.Time.Before(now.Add(r.AuthorizedUntil.Sub(now)/2)) {
			return true
		}
	}
	return false
}

// normalize drops fields that change every renewal, so only real changes cause writes
// (renewals are written when untilStale says so).
func normalize(s brewletv1.NodeRuntimeStatus) brewletv1.NodeRuntimeStatus {
	s.ObservedAt = nil
	rs := make([]brewletv1.NodeRuntimeEntry, len(s.Runtimes))
	for i, r := range s.Runtimes {
		r.AuthorizedUntil = nil
		rs[i] = r
	}
	s.Runtimes = rs
	if len(s.Tasks) == 0 {
		s.Tasks = nil
	}
	if len(s.FailedStarts) == 0 {
		s.FailedStarts = nil
	}
	if len(s.Runtimes) == 0 {
		s.Runtimes = nil
	}
	return s
}
