package nodeprofile

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/finalizers"
	"brewlet.sh/brewlet/internal/operator/fleetpause"
	"brewlet.sh/brewlet/internal/operator/rollout"
	"brewlet.sh/brewlet/internal/vocab"
)

// eventAction is the events.k8s.io action of the events this controller records.
const eventAction = "ReconcileNodeProfile"

// conflictRetry: a lost optimistic-concurrency race is retried shortly, from fresher reads.
const conflictRetry = 200 * time.Millisecond

// Reconciler is the thin NodeProfile reconciler: read (informer caches), Decide, write.
type Reconciler struct {
	// Client reads from the informer caches and writes to the API server.
	Client client.Client
	// Recorder records events on NodeProfiles (nil: none).
	Recorder events.EventRecorder
	// Now is the clock for condition transition times (tests); nil means metav1.Now.
	Now func() metav1.Time
	// Beats are the agents' heartbeats (nil: agents are not judged, no node is listed in
	// status.nodesWithoutAgent).
	Beats Heartbeats
	// AgentPods reads the agents' pods straight from the API server, only when some
	// assigned node's heartbeat is stale (nil: none are read).
	AgentPods func(ctx context.Context) ([]corev1.Pod, error)
}

// Heartbeats is what the reconciler needs of the operator's heartbeat clock.
type Heartbeats interface {
	Fresh(node string, now time.Time) bool
	Silent(node string, now time.Time) bool
	LastBeat(node string) (time.Time, bool)
	StaleAfterOrDefault() time.Duration
}

// agentRecheck: while a node lacks a running agent, its pod's state is read again this
// often (a pod's status changes wake no profile).
const agentRecheck = 30 * time.Second

// Reconcile brings one NodeProfile's status and its nodes' NodeRuntime specs to what
// Decide says (RuntimeClass brewlet is package runtimeclass's). Every write is conditional on the resourceVersion it
// was decided from; a conflict (the agent wrote its status, another replica wrote first)
// requeues the profile, and the next pass decides again from fresher reads.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	p := &brewletv1.NodeProfile{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	in, err := r.read(ctx, p)
	if err != nil {
		return reconcile.Result{}, err
	}
	d := Decide(in)
	if d.AddFinalizer {
		// Before any node is served: every change this profile leads to is then held
		// until its cleanup is done.
		if err := finalizers.Patch(ctx, r.Client, p, func() { controllerutil.AddFinalizer(p, vocab.FinalizerCleanup) }); err != nil {
			return reconcile.Result{RequeueAfter: conflictRetry}, client.IgnoreNotFound(ignoreConflict(err))
		}
		return reconcile.Result{}, nil // the update wakes the next pass
	}
	err = r.write(ctx, p, in, d)
	if after := rollout.Recheck(r.agentRequeue(d), d.NextDeadline, in.Now.Time); err == nil && after > 0 {
		defer func() {
			if res.IsZero() && err == nil {
				res = reconcile.Result{RequeueAfter: after}
			}
		}()
	}
	if err == nil && d.ReleaseFinalizer {
		// No node owes this profile anything: the deletion completes.
		err = finalizers.Patch(ctx, r.Client, p, func() { controllerutil.RemoveFinalizer(p, vocab.FinalizerCleanup) })
	}
	switch {
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err):
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	case err != nil && ctx.Err() != nil:
		return reconcile.Result{}, nil // stopping: the next leader decides again
	}
	return reconcile.Result{}, err
}

func (r *Reconciler) read(ctx context.Context, p *brewletv1.NodeProfile) (Input, error) {
	in := Input{Profile: p, Images: map[string]*brewletv1.RuntimeImage{}, Runtimes: map[string]*brewletv1.NodeRuntime{}, Now: r.now()}
	if r.Beats != nil {
		now := in.Now.Time
		in.Agents = AgentFacts{Fresh: func(n string) bool { return r.Beats.Fresh(n, now) }, LastBeat: r.Beats.LastBeat,
			Silent: func(n string) bool { return r.Beats.Silent(n, now) }}
		if r.AgentPods != nil {
			in.Agents.Pods = func() ([]corev1.Pod, error) { return r.AgentPods(ctx) }
		}
	}
	var profiles brewletv1.NodeProfileList
	if err := r.Client.List(ctx, &profiles, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("list NodeProfiles: %w", err)
	}
	in.Profiles = profiles.Items
	pause, err := fleetpause.Read(ctx, r.Client)
	if err != nil {
		return in, err
	}
	in.FleetPause = pause
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("list Nodes: %w", err)
	}
	in.Nodes = nodes.Items
	var ris brewletv1.RuntimeImageList
	if err := r.Client.List(ctx, &ris, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("list RuntimeImages: %w", err)
	}
	for i := range ris.Items {
		in.Images[ris.Items[i].Name] = &ris.Items[i]
	}
	var nrts brewletv1.NodeRuntimeList
	if err := r.Client.List(ctx, &nrts, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("list NodeRuntimes: %w", err)
	}
	for i := range nrts.Items {
		in.Runtimes[nrts.Items[i].Name] = &nrts.Items[i]
	}
	var evidence brewletv1.NodeRetirementEvidenceList
	if err := r.Client.List(ctx, &evidence, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("list NodeRetirementEvidences: %w", err)
	}
	in.Accepted = map[string]bool{}
	for _, e := range evidence.Items {
		if e.Status.Phase == brewletv1.EvidenceAccepted || e.Status.Phase == brewletv1.EvidenceResolved {
			in.Accepted[ledgerKey(e.Spec.NodeName, types.UID(e.Spec.NodeUID))] = true
		}
	}
	return in, nil
}

// agentRequeue is when a profile is decided again for its agents' sake: a heartbeat going
// stale wakes nothing (no object changes), so a profile with nodes is looked at again every
// staleness period, and every agentRecheck while some node lacks its agent. 0: not needed.
func (r *Reconciler) agentRequeue(d Decision) time.Duration {
	switch {
	case r.Beats == nil || d.ReleaseFinalizer || len(d.Assigned) == 0:
		return 0
	case d.Status.NodesWithoutAgentCount > 0:
		return agentRecheck
	}
	return r.Beats.StaleAfterOrDefault()
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// write applies the decision: NodeRuntime specs first (they are what nodes act on), then
// the status, then the events of a status that was actually stored.
func (r *Reconciler) write(ctx context.Context, p *brewletv1.NodeProfile, in Input, d Decision) error {
	uids := map[string]corev1.Node{}
	for _, n := range in.Nodes {
		uids[n.Name] = n
	}
	var firstErr error
	for _, name := range d.Assigned {
		if err := r.writeSpec(ctx, uids[name], in.Runtimes[name], d.Specs[name]); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if !equality.Semantic.DeepEqual(p.Status, d.Status) {
		p.Status = d.Status
		if err := r.Client.Status().Update(ctx, p); err != nil {
			return err
		}
		for _, e := range d.Events {
			if r.Recorder != nil {
				r.Recorder.Eventf(p, nil, e.Type, string(e.Reason), eventAction, "%s", e.Message)
			}
		}
	}
	return firstErr
}

// writeSpec creates the node's NodeRuntime when missing, exactly as the node's agent does
// (same name, the Node as controlling owner, so Kubernetes collects it with the Node):
// whichever of the two comes first, the other reads it (AlreadyExists is expected).
func (r *Reconciler) writeSpec(ctx context.Context, node corev1.Node, nrt *brewletv1.NodeRuntime, spec brewletv1.NodeRuntimeSpec) error {
	if nrt == nil {
		ctrl := true
		nrt = &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: node.Name,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: &ctrl}}},
			Spec: spec}
		return r.Client.Create(ctx, nrt)
	}
	if SpecEqual(nrt.Spec, spec) {
		return nil
	}
	nrt = nrt.DeepCopy()
	nrt.Spec = spec
	return r.Client.Update(ctx, nrt)
}

func (r *Reconciler) now() metav1.Time {
	if r.Now != nil {
		return r.Now()
	}
	return metav1.Now()
}
