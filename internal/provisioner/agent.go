package provisioner

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// Agent is the provisioner's loop for one node. Every pass reads the cluster straight from
// the API server (a view confirmed fresh by the successful reads themselves), installs what
// the node's profile offers, renews or revokes authorizations, and publishes labels and the
// NodeRuntime status when they change.
type Agent struct {
	Client    client.Client // uncached: reads are quorum reads
	NodeName  string
	Layout    hoststate.Layout
	Installer *Installer
	// AuthTTL is how long an authorization stays valid without a fresh confirmation.
	AuthTTL time.Duration
	// Period is the pause between passes; renewals need several passes per AuthTTL.
	Period time.Duration
	// IsWriter reports whether this agent holds the node's writer lease (nil: always).
	IsWriter func() bool
	// Collector, when set, removes unused generations and layers after each pass.
	Collector *Collector
	// Metrics, when set, counts installs.
	Metrics *Metrics
	// Host is what PrepareHost did to the node (shim, containerd handler), for the report.
	Host *brewletv1.NodeCleanup
	Log  func(format string, args ...any)

	fenceOpen bool
	states    map[string]brewletv1.NodeRuntimeEntry
}

func (a *Agent) logf(format string, args ...any) {
	if a.Log != nil {
		a.Log(format, args...)
	}
}

// Run closes the startup fence, then reconciles every Period until ctx ends. The fence opens
// after the first pass that confirmed on-disk state against the cluster.
func (a *Agent) Run(ctx context.Context) error {
	if a.Period <= 0 {
		a.Period = a.AuthTTL / 5
	}
	if err := a.Layout.CloseFence(); err != nil {
		return err
	}
	a.fenceOpen = false
	for {
		if err := a.Reconcile(ctx); err != nil {
			a.logf("reconcile: %v", err)
		}
		// Sleep a period, but wake at once for a container waiting on an OnDemand install.
		deadline := time.Now().Add(a.Period)
		for time.Now().Before(deadline) && !a.Layout.PendingRequests() {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(250 * time.Millisecond):
			}
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// Reconcile runs one pass.
func (a *Agent) Reconcile(ctx context.Context) error {
	if a.IsWriter != nil && !a.IsWriter() {
		return errors.New("not the node's writer: another agent holds the writer lease")
	}
	if a.states == nil {
		a.states = map[string]brewletv1.NodeRuntimeEntry{}
	}
	node := &corev1.Node{}
	if err := a.Client.Get(ctx, client.ObjectKey{Name: a.NodeName}, node); err != nil {
		return fmt.Errorf("read node %s: %w", a.NodeName, err)
	}
	var profiles brewletv1.NodeProfileList
	if err := a.Client.List(ctx, &profiles); err != nil {
		return fmt.Errorf("list NodeProfiles: %w", err)
	}
	var ris brewletv1.RuntimeImageList
	if err := a.Client.List(ctx, &ris); err != nil {
		return fmt.Errorf("list RuntimeImages: %w", err)
	}
	nrt, err := a.ensureNodeRuntime(ctx, node)
	if err != nil {
		return err
	}
	confirmed := time.Now() // every read above succeeded: the view is fresh
	profile, perr := SelectProfile(node, profiles.Items)
	images := map[string]*brewletv1.RuntimeImage{}
	for i := range ris.Items {
		images[ris.Items[i].Name] = &ris.Items[i]
	}
	held := make([]string, 0, len(a.states))
	for id := range a.states {
		held = append(held, id)
	}
	if perr != nil {
		profile = nil // a pool conflict revokes everything until an administrator resolves it
		a.logf("%v", perr)
	}
	for _, t := range Targets(profile, images, nrt.Spec, held) {
		a.states[t.ID] = a.apply(ctx, t, confirmed)
	}
	if !a.fenceOpen {
		if err := a.Layout.OpenFence(); err != nil {
			return err
		}
		a.fenceOpen = true
	}
	if err := a.publishLabels(ctx, node); err != nil {
		return err
	}
	if err := a.publishStatus(ctx, node, nrt); err != nil {
		return err
	}
	if a.Collector != nil {
		got, err := a.Collector.Collect()
		if err != nil {
			a.logf("garbage collection: %v", err)
		} else if len(got.Generations)+len(got.Layers) > 0 {
			a.logf("garbage collection removed generations %v and %d layers", got.Generations, len(got.Layers))
		}
	}
	return nil
}

// apply installs and authorizes one target, or revokes it, and returns its state.
func (a *Agent) apply(ctx context.Context, t Target, confirmed time.Time) brewletv1.NodeRuntimeEntry {
	e := brewletv1.NodeRuntimeEntry{ID: t.ID, Epoch: types.UID(t.Epoch), Generation: t.Generation}
	if t.Revoke {
		if _, err := a.Layout.ReadAuthorization(t.ID); err == nil {
			_ = a.Layout.WriteAuthorization(hoststate.Authorization{ID: t.ID, Revoked: true, Reason: t.Message, Node: a.NodeName})
		}
		e.State, e.Reason, e.Message = string(vocab.StateRevoked), string(t.Reason), t.Message
		if t.Reason == vocab.ReasonRuntimeImageRevoked || t.Reason == vocab.ReasonUnknownRuntimeImage {
			return e
		}
		e.State = string(vocab.StateInstalling)
		return e
	}
	cur, cerr := a.Layout.Current(t.ID)
	have := cerr == nil && cur.Epoch == t.Epoch && cur.Generation >= t.Generation
	var failed *brewletv1.NodeRuntimeEntry
	onDemand := t.Install == string(vocab.InstallOnDemand)
	if !have && t.Image != "" && (!onDemand || a.Layout.InstallRequested(t.ID)) {
		a.logf("installing %s generation %d from %s", t.ID, t.Generation, t.Image)
		start := time.Now()
		res, err := a.Installer.Install(ctx, Request{ID: t.ID, Epoch: t.Epoch, Generation: t.Generation, Image: t.Image, UID: t.UID, GID: t.GID})
		a.Metrics.ObserveInstall(t.ID, installOutcome(err), time.Since(start))
		if err != nil {
			a.logf("install %s generation %d: %v", t.ID, t.Generation, err)
			reason := string(reasonOr(err, vocab.ReasonRuntimeImagePullFailed))
			if cerr != nil || cur.Epoch != t.Epoch {
				e.State, e.Reason, e.Message = string(vocab.StateFailed), reason, err.Error()
				a.withdrawIfOtherEpoch(t)
				return e
			}
			// The refused generation never becomes current; the one in use stays served.
			failed = &brewletv1.NodeRuntimeEntry{Reason: reason,
				Message: fmt.Sprintf("generation %d refused, generation %d stays in use: %v", t.Generation, cur.Generation, err)}
		} else {
			a.logf("installed %s generation %d: %d layers fetched, %d reused", t.ID, t.Generation, res.LayersFetched, res.LayersReused)
			cur, have = hoststate.Ref{Epoch: t.Epoch, Generation: t.Generation}, true
		}
		a.Layout.ClearRequest(t.ID)
	}
	if failed != nil {
		have = true
	}
	if !have || cur.Epoch != t.Epoch {
		a.withdrawIfOtherEpoch(t)
		if !onDemand {
			e.State = string(vocab.StateInstalling)
			return e
		}
		// Offered on first use: authorize the ID so the shim may ask for the install.
		e.State = string(vocab.StateAvailable)
		if err := a.Layout.WriteAuthorization(hoststate.Authorization{ID: t.ID, Epoch: t.Epoch, Generation: t.Generation,
			OnDemand: true, ConfirmedAt: confirmed, ExpiresAt: confirmed.Add(a.AuthTTL), Node: a.NodeName}); err != nil {
			e.State, e.Reason, e.Message = string(vocab.StateFailed), string(vocab.ReasonRuntimeImageNotInstalled), err.Error()
		}
		return e
	}
	g, err := a.Layout.ReadGeneration(t.ID, cur)
	if err != nil {
		e.State, e.Reason, e.Message = string(vocab.StateFailed), string(vocab.ReasonRuntimeImageNotInstalled), err.Error()
		return e
	}
	auth := hoststate.Authorization{ID: t.ID, Epoch: cur.Epoch, Generation: cur.Generation, Digest: g.Digest,
		ConfirmedAt: confirmed, ExpiresAt: confirmed.Add(a.AuthTTL), Node: a.NodeName}
	if err := a.Layout.WriteAuthorization(auth); err != nil {
		e.State, e.Reason, e.Message = string(vocab.StateFailed), string(vocab.ReasonRuntimeImageNotInstalled), err.Error()
		return e
	}
	until := metav1.NewTime(auth.ExpiresAt.Truncate(time.Second))
	e.State, e.Generation, e.Digest, e.AuthorizedUntil = string(vocab.StateReady), cur.Generation, g.Digest, &until
	if failed != nil {
		e.Reason, e.Message = failed.Reason, failed.Message
	}
	return e
}

// withdrawIfOtherEpoch revokes an authorization left from an older epoch: nothing of an old
// epoch is trusted for the new one.
func (a *Agent) withdrawIfOtherEpoch(t Target) {
	if old, err := a.Layout.ReadAuthorization(t.ID); err == nil && old.Epoch != t.Epoch && !old.Revoked {
		_ = a.Layout.WriteAuthorization(hoststate.Authorization{ID: t.ID, Revoked: true, Node: a.NodeName,
			Reason: "the RuntimeImage was recreated (new epoch) and its first generation is not installed yet"})
	}
}

func installOutcome(err error) string {
	switch vocab.ReasonOf(err) {
	case "":
		if err == nil {
			return "success"
		}
		return "failed"
	case vocab.ReasonRuntimeImagePullFailed:
		return "failed"
	default:
		return "refused"
	}
}

func reasonOr(err error, r vocab.Reason) vocab.Reason {
	if got := vocab.ReasonOf(err); got != "" {
		return got
	}
	return r
}

func (a *Agent) ensureNodeRuntime(ctx context.Context, node *corev1.Node) (*brewletv1.NodeRuntime, error) {
	nrt := &brewletv1.NodeRuntime{}
	err := a.Client.Get(ctx, client.ObjectKey{Name: a.NodeName}, nrt)
	if apierrors.IsNotFound(err) {
		ctrl := true
		nrt = &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: a.NodeName,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: &ctrl}}}}
		err = a.Client.Create(ctx, nrt)
	}
	return nrt, err
}

// publishLabels sets this node's brewlet.sh/* labels, touching no other label.
func (a *Agent) publishLabels(ctx context.Context, node *corev1.Node) error {
	states := map[string]vocab.RuntimeState{}
	for id, e := range a.states {
		states[id] = vocab.RuntimeState(e.State)
	}
	want := Labels(states)
	patch := client.MergeFrom(node.DeepCopy())
	changed := false
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for k, v := range node.Labels {
		if strings.HasPrefix(k, vocab.Domain+"/") && want[k] != v {
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
	st := brewletv1.NodeRuntimeStatus{NodeUID: node.UID, Complete: true, Cleanup: a.Host}
	for _, e := range a.states {
		st.Runtimes = append(st.Runtimes, e)
	}
	sort.Slice(st.Runtimes, func(i, j int) bool { return st.Runtimes[i].ID < st.Runtimes[j].ID })
	leases, err := a.Layout.Leases()
	if err != nil {
		st.Complete = false // an unreadable lease: the report cannot claim to be complete
	}
	for _, l := range leases {
		st.Tasks = append(st.Tasks, brewletv1.NodeTask{PodNamespace: l.PodNamespace, PodName: l.PodName,
			PodUID: types.UID(l.PodUID), ContainerName: l.ContainerName, ID: l.ID, Epoch: types.UID(l.Epoch), Generation: l.Generation})
	}
	sort.Slice(st.Tasks, func(i, j int) bool {
		return st.Tasks[i].PodUID+types.UID(st.Tasks[i].ContainerName) < st.Tasks[j].PodUID+types.UID(st.Tasks[j].ContainerName)
	})
	old := nrt.Status
	old.ObservedAt = nil
	if reflect.DeepEqual(normalize(old), normalize(st)) {
		return nil
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	st.ObservedAt = &now
	nrt.Status = st
	return a.Client.Status().Update(ctx, nrt)
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
