package provisioner

import (
	"context"
	"reflect"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

func (a *Agent) ensureNodeRuntime(ctx context.Context, node *corev1.Node) (*brewletv1.NodeRuntime, error) {
	nrt := &brewletv1.NodeRuntime{}
	err := a.Client.Get(ctx, client.ObjectKey{Name: a.NodeName}, nrt)
	if apierrors.IsNotFound(err) {
		ctrl := true
		nrt = &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: a.NodeName,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: &ctrl}}}}
		err = a.Client.Create(ctx, nrt)
		if apierrors.IsAlreadyExists(err) {
			// brewlet-operator creates it too (to write spec before the agent ever ran),
			// with the same name and owner: whichever is first, the other reads it.
			nrt = &brewletv1.NodeRuntime{}
			err = a.Client.Get(ctx, client.ObjectKey{Name: a.NodeName}, nrt)
		}
	}
	return nrt, err
}

// publishLabels sets this node's Brewlet labels (vocab.OwnNodeLabel), touching no other
// label; Brewlet labels it no longer wants, the legacy runtime keys among them, are removed.
func (a *Agent) publishLabels(ctx context.Context, node *corev1.Node) error {
	states := map[string]vocab.RuntimeState{}
	for id, e := range a.states {
		states[id] = vocab.RuntimeState(e.State)
	}
	want := Labels(states)
	if a.HostSetup != nil {
		// Keeps the agent scheduled here until its host changes are reversed; an
		// unreadable record counts as changes (they may exist).
		if owed, err := a.HostSetup.Recorded(); owed || err != nil {
			want[vocab.LabelHostChanges] = vocab.LabelValuePresent
		}
	}
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
	return a.Client.Patch(ctx, node, patch)
}

// publishStatus writes the NodeRuntime status when it changed (not on every pass).
func (a *Agent) publishStatus(ctx context.Context, node *corev1.Node, nrt *brewletv1.NodeRuntime) error {
	st := brewletv1.NodeRuntimeStatus{NodeUID: node.UID, AgentPodUID: a.PodUID, Cleanup: a.cleanupReport(a.selected)}
	for _, e := range a.states {
		st.Runtimes = append(st.Runtimes, e)
	}
	sort.Slice(st.Runtimes, func(i, j int) bool { return st.Runtimes[i].ID < st.Runtimes[j].ID })
	// Complete only when every lease was read and containerd said which of them still run.
	st.Tasks, st.Complete = a.reportTasks(ctx)
	sort.SliceStable(st.Tasks, func(i, j int) bool {
		return st.Tasks[i].PodUID+types.UID(st.Tasks[i].ContainerName) < st.Tasks[j].PodUID+types.UID(st.Tasks[j].ContainerName)
	})
	// The operator writes this object's spec while the pass runs: on a conflict the status
	// (this agent's alone) is applied again to the object as it is now.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		old := nrt.Status
		old.ObservedAt = nil
		if reflect.DeepEqual(normalize(old), normalize(st)) {
			return nil
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		st.ObservedAt = &now
		nrt.Status = st
		err := a.Client.Status().Update(ctx, nrt)
		if apierrors.IsConflict(err) {
			if gerr := a.Client.Get(ctx, client.ObjectKeyFromObject(nrt), nrt); gerr != nil {
				return gerr
			}
		}
		return err
	})
}

// normalize drops fields that change every renewal, so only real changes cause writes.
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
	if len(s.Runtimes) == 0 {
		s.Runtimes = nil
	}
	return s
}
