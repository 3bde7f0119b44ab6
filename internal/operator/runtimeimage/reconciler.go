package runtimeimage

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/finalizers"
	"brewlet.sh/brewlet/internal/operator/fleetpause"
	"brewlet.sh/brewlet/internal/operator/nodereports"
	"brewlet.sh/brewlet/internal/operator/rollout"
	"brewlet.sh/brewlet/internal/vocab"
)

// conflictAttempts bounds how often one pass re-reads and re-decides after losing an
// optimistic-concurrency race before it hands the request back to the rate-limited queue.
const conflictAttempts = 5

// cacheBehindRetry is when a pass skipped for a cache behind our own write looks again if
// no watch event has brought it back before.
const cacheBehindRetry = 2 * time.Second

// Reconciler is the thin RuntimeImage reconciler: read, Decide, write.
type Reconciler struct {
	// Client reads from the informer cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server directly: after a conflict (the cache is behind
	// the write that beat us) and to confirm that no node holds an epoch before its
	// finalizer is released.
	APIReader client.Reader
	// Now is the clock for condition transition times (tests); nil means metav1.Now.
	Now func() metav1.Time
	// Recorder records events on RuntimeImages (nil: none).
	Recorder events.EventRecorder
	// Signatures checks the signatures RuntimeImages require (nil: only spec.verification,
	// read with the system's trust and no credentials).
	Signatures *SignatureChecker
	// Beats are the agents' per-node Lease renewals, the nodes' heartbeats, on the
	// operator's clock (nil: every node counts as not reporting).
	Beats *nodereports.HeartbeatClock

	// overwritten holds, per RuntimeImage, the resourceVersion its last write by this
	// reconciler replaced. While the cache still shows that version, a pass would decide
	// from what was just overwritten and its write could only conflict; the write's own
	// watch event wakes the pass again once the cache has it.
	overwritten sync.Map
}

// cacheBehind says whether ri (from the cache) is the version this reconciler's last
// write replaced, and forgets the mark once the cache has moved past it.
func (r *Reconciler) cacheBehind(ri *brewletv1.RuntimeImage) bool {
	from, ok := r.overwritten.Load(ri.Name)
	if !ok {
		return false
	}
	if from == ri.ResourceVersion {
		return true
	}
	r.overwritten.Delete(ri.Name)
	return false
}

// write sends one write (update or status update) and, when it lands, marks the version
// it replaced.
func (r *Reconciler) write(ri *brewletv1.RuntimeImage, do func() error) error {
	from := ri.ResourceVersion
	if err := do(); err != nil {
		return err
	}
	r.overwritten.Store(ri.Name, from)
	return nil
}

// Reconcile brings one RuntimeImage's status and finalizer to what Decide says. Every write
// carries the resourceVersion the decision was made from; on a conflict the object is read
// again from the API server and the decision made again, so a generation is only ever
// derived from the status actually stored.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ri := &brewletv1.RuntimeImage{}
	if err := r.Client.Get(ctx, req.NamespacedName, ri); err != nil {
		if apierrors.IsNotFound(err) {
			forget(req.Name)
			r.overwritten.Delete(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.cacheBehind(ri) {
		// The update event of our own write brings the pass back; the delay only covers a
		// watch that never delivers it.
		return reconcile.Result{RequeueAfter: cacheBehindRetry}, nil
	}
	for attempt := 1; ; attempt++ {
		after, err := r.pass(ctx, ri)
		if !apierrors.IsConflict(err) || attempt == conflictAttempts {
			if apierrors.IsNotFound(err) {
				return reconcile.Result{}, nil // deleted under us; the delete event follows
			}
			if ctx.Err() != nil {
				return reconcile.Result{}, nil // stopping: the next leader decides again from the stored status
			}
			if err == nil && after > 0 {
				return reconcile.Result{RequeueAfter: after}, nil
			}
			return reconcile.Result{}, err
		}
		ri = &brewletv1.RuntimeImage{}
		if err := r.APIReader.Get(ctx, req.NamespacedName, ri); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
}

// pass makes one decision from ri and writes it. The finalizer goes on before any status,
// so no node can ever be handed a generation of an epoch that could vanish without the
// hold.
//
// It returns when to look again though nothing changed (0: not needed): a heartbeat that
// stops, or a node's installBy that passes, changes no object, yet marks containers as
// unreported or excludes a node from the rotation.
func (r *Reconciler) pass(ctx context.Context, ri *brewletv1.RuntimeImage) (time.Duration, error) {
	reports := &brewletv1.NodeRuntimeList{}
	if err := r.Client.List(ctx, reports, client.MatchingFields{nodereports.IndexRuntimeID: ri.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("list NodeRuntimes reporting %s: %w", ri.Name, err)
	}
	budget, missing, err := r.profileFacts(ctx, ri.Name)
	if err != nil {
		return 0, err
	}
	beats := r.Beats.Heartbeats()
	now := r.now()
	pause, err := fleetpause.Read(ctx, r.Client)
	if err != nil {
		return 0, err
	}
	sig, sigAfter := r.Signatures.CheckAll(ctx, ri)
	d := Decide(ri, reports.Items, budget, func(node string) bool { return beats.Fresh(node, now.Time, r.staleAfter()) },
		func(node string) bool { return r.Beats.Silent(node, now.Time) }, pause, sig, now)
	nameMissingAgents(&d.Status, missing)
	var after time.Duration
	if len(d.Status.TaskObservations) > 0 || d.Recheck {
		after = r.staleAfter()
	}
	if sigAfter > 0 && (after == 0 || sigAfter < after) {
		after = sigAfter
	}
	after = rollout.Recheck(after, d.NextDeadline, now.Time)
	if d.AddFinalizer {
		if err := r.write(ri, func() error {
			return finalizers.Patch(ctx, r.Client, ri, func() { controllerutil.AddFinalizer(ri, vocab.FinalizerRevocation) })
		}); err != nil {
			return 0, err
		}
	}
	if !equality.Semantic.DeepEqual(ri.Status, d.Status) {
		ri.Status = d.Status
		if err := r.write(ri, func() error { return r.Client.Status().Update(ctx, ri) }); err != nil {
			return 0, err
		}
		for _, e := range d.Events {
			if r.Recorder != nil {
				r.Recorder.Eventf(ri, nil, e.Type, string(e.Reason), eventAction, "%s", e.Message)
			}
		}
	}
	observe(ri, reports.Items)
	if !d.ReleaseFinalizer {
		return after, nil
	}
	// The cache said no node holds the epoch; a watch that lags could hide a report
	// written before the deletion. Releasing is final and happens once per object, so
	// it is worth one read from the API server.
	fresh := &brewletv1.NodeRuntimeList{}
	if err := r.APIReader.List(ctx, fresh); err != nil {
		return 0, fmt.Errorf("confirm that no node holds %s epoch %s: %w", ri.Name, ri.UID, err)
	}
	if holders := Holders(ri.Name, ri.UID, fresh.Items); len(holders) > 0 {
		return 0, fmt.Errorf("%s epoch %s is still held by node(s) %v (the cache was behind)", ri.Name, ri.UID, holders)
	}
	if err := finalizers.Patch(ctx, r.Client, ri, func() { controllerutil.RemoveFinalizer(ri, vocab.FinalizerRevocation) }); err != nil {
		return 0, err
	}
	forget(ri.Name)
	return 0, nil
}

// profileFacts reads the NodeProfiles offering id: the smallest rollout.maxFailures among
// them (rollout.DefaultMaxFailures when none does; the rotation is reported halted as soon
// as one pool stops it) and, per profile, its nodes without a running agent.
func (r *Reconciler) profileFacts(ctx context.Context, id string) (int, []string, error) {
	var ps brewletv1.NodeProfileList
	if err := r.Client.List(ctx, &ps, client.UnsafeDisableDeepCopy); err != nil {
		return 0, nil, fmt.Errorf("list NodeProfiles: %w", err)
	}
	budget := -1
	var missing []string
	for i := range ps.Items {
		p := &ps.Items[i]
		for _, o := range p.Spec.RuntimeImages {
			if o.ID != id {
				continue
			}
			if b := rollout.PolicyOf(p.Spec.Rollout, 0).MaxFailures; budget < 0 || b < budget {
				budget = b
			}
			if p.Status.NodesWithoutAgentCount > 0 {
				missing = append(missing, fmt.Sprintf("%s (NodeProfile %s)", nodereports.ProblemSummary(p.Status.NodesWithoutAgent, p.Status.NodesWithoutAgentCount), p.Name))
			}
		}
	}
	if budget < 0 {
		budget = rollout.DefaultMaxFailures
	}
	slices.Sort(missing)
	return budget, missing, nil
}

// staleAfter is how long a node's heartbeat may be old before its report is shown as not
// current (nodereports.HeartbeatClock.StaleAfter).
func (r *Reconciler) staleAfter() time.Duration { return r.Beats.StaleAfterOrDefault() }

func (r *Reconciler) now() metav1.Time {
	if r.Now != nil {
		return r.Now()
	}
	return metav1.Now()
}
