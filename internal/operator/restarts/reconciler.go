package restarts

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/fleetpause"
	"brewlet.sh/brewlet/internal/operator/nodereports"
	"brewlet.sh/brewlet/internal/vocab"
)

// Reconciler restarts the opted-in workloads of one RuntimeImage per pass.
type Reconciler struct {
	Client    client.Client // informer cache reads, API writes
	APIReader client.Reader // fresh reads after a status conflict
	Recorder  events.EventRecorder
	Policy    Policy
	// Beats are the agents' Lease renewals, the nodes' heartbeats (nil: every node stale).
	Beats *nodereports.HeartbeatClock
	Now   func() time.Time
}

// Reconcile decides and acts for one RuntimeImage. While a restart is in progress it looks
// again periodically: a rollout's deadline passes without any object changing.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ri := &brewletv1.RuntimeImage{}
	if err := r.Client.Get(ctx, req.NamespacedName, ri); err != nil {
		if apierrors.IsNotFound(err) {
			forget(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	t, ok := TargetOf(ri)
	if !ok {
		return reconcile.Result{}, nil // the rotation has not reached every node yet
	}
	if t.Pause == "" {
		pause, err := fleetpause.Read(ctx, r.Client)
		if err != nil {
			return reconcile.Result{}, err
		}
		t.Pause = pause
	}
	workloads, err := r.workloads(ctx, t.ID)
	if err != nil {
		return reconcile.Result{}, err
	}
	reports := &brewletv1.NodeRuntimeList{}
	if err := r.Client.List(ctx, reports, client.MatchingFields{nodereports.IndexRuntimeID: t.ID}, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, err
	}
	beats := r.Beats.Heartbeats()
	now := r.now()
	tasks := TasksOf(t, reports.Items, func(n string) bool { return beats.Fresh(n, now, r.staleAfter()) },
		func(n string) bool { return r.Beats.Silent(n, now) }, now)
	inFlight, err := r.inFlightElsewhere(ctx, ri.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	var previous []brewletv1.WorkloadRestart
	if ri.Status.Rotation != nil {
		previous = ri.Status.Rotation.Restarts
	}
	actions := Decide(t, workloads, tasks, previous, inFlight, r.Policy, now)
	for i := range actions {
		a := &actions[i]
		if !a.Patch {
			continue
		}
		if err := r.patch(ctx, a.Workload, t.Barrier); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			// Not patched: it is not in progress. A refusal (the admission policy, RBAC)
			// is recorded as the outcome and retried on the next pass.
			log.FromContext(ctx).Error(err, "restart refused", "workload", a.Workload.Key())
			patchesTotal.WithLabelValues(t.ID, "refused").Inc()
			a.Record.Outcome, a.Record.Reason, a.Record.StartedAt = OutcomePending, ReasonPatchRefused, nil
			a.Record.Message = fmt.Sprintf("setting %s was refused: %v", vocab.AnnotationRotatedToGeneration, err)
			continue
		}
		patchesTotal.WithLabelValues(t.ID, "applied").Inc()
		log.FromContext(ctx).Info("restarting a workload onto the rotation's generation", "workload", a.Workload.Key(), "barrier", t.String())
		r.event(a.Workload, corev1.EventTypeNormal, "RotationRestart", a.Record.Message)
	}
	records, counts := Records(actions)
	halt := HaltOf(actions, t, r.Policy)
	if halt != nil && (ri.Status.Rotation == nil || ri.Status.Rotation.RestartsHalted == nil) && r.Recorder != nil {
		r.Recorder.Eventf(ri, nil, corev1.EventTypeWarning, string(vocab.ReasonRestartsHalted), "RotationRestart", "%s", halt.Message)
	}
	for _, a := range actions {
		if a.Record.Outcome == OutcomeFailed && !wasFailed(previous, a.Record) {
			r.event(a.Workload, corev1.EventTypeWarning, "RotationRestartFailed", a.Record.Message)
		}
	}
	if err := r.record(ctx, ri, records, counts, halt); err != nil {
		return reconcile.Result{}, err
	}
	observe(t.ID, counts)
	if counts != nil && counts.InProgress+counts.Pending > 0 {
		return reconcile.Result{RequeueAfter: 15 * time.Second}, nil
	}
	return reconcile.Result{}, nil
}

func wasFailed(previous []brewletv1.WorkloadRestart, rec brewletv1.WorkloadRestart) bool {
	for _, p := range previous {
		if p.Kind == rec.Kind && p.Namespace == rec.Namespace && p.Name == rec.Name {
			return p.Outcome == OutcomeFailed
		}
	}
	return false
}

// record writes status.rotation.restarts and restartCounts when they changed. The
// RuntimeImage controller writes the rest of the status, often: a JSON patch that touches
// only these two fields, tested against the target the records are about, never conflicts
// with those writes and never lands on another target's rotation.
func (r *Reconciler) record(ctx context.Context, ri *brewletv1.RuntimeImage, records []brewletv1.WorkloadRestart, counts *brewletv1.RestartCounts, halt *brewletv1.RestartsHalt) error {
	rot := ri.Status.Rotation
	if rot == nil {
		return nil // the target changed under us: the next pass decides again
	}
	if equality.Semantic.DeepEqual(rot.Restarts, records) && equality.Semantic.DeepEqual(rot.RestartCounts, counts) &&
		equality.Semantic.DeepEqual(rot.RestartsHalted, halt) {
		return nil
	}
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/status/epoch", "value": ri.Status.Epoch},
		{"op": "test", "path": "/status/generation", "value": ri.Status.Generation},
		{"op": "test", "path": "/status/rotation/target/generation", "value": rot.Target.Generation},
		{"op": "test", "path": "/status/rotation/target/digest", "value": rot.Target.Digest},
		{"op": "add", "path": "/status/rotation/restarts", "value": records},
		{"op": "add", "path": "/status/rotation/restartCounts", "value": counts},
		{"op": "add", "path": "/status/rotation/restartsHalted", "value": halt},
	})
	if err != nil {
		return err
	}
	err = r.Client.Status().Patch(ctx, ri, client.RawPatch(types.JSONPatchType, body))
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	// A failed test is the target moving on (the next pass decides for the new one);
	// anything else is retried by the queue.
	fresh := &brewletv1.RuntimeImage{}
	if gerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ri), fresh); gerr != nil {
		return client.IgnoreNotFound(gerr)
	}
	if fr := fresh.Status.Rotation; fresh.Status.Epoch != ri.Status.Epoch || fresh.Status.Generation != ri.Status.Generation ||
		fr == nil || fr.Target.Generation != rot.Target.Generation || fr.Target.Digest != rot.Target.Digest {
		return nil
	}
	return fmt.Errorf("RuntimeImage %s: write restart records: %w", ri.Name, err)
}

// inFlightElsewhere counts restarts in progress for the other RuntimeImages: the limit is
// the operator's.
func (r *Reconciler) inFlightElsewhere(ctx context.Context, id string) (int, error) {
	var ris brewletv1.RuntimeImageList
	if err := r.Client.List(ctx, &ris, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	n := 0
	for i := range ris.Items {
		t, ok := TargetOf(&ris.Items[i])
		if ris.Items[i].Name == id || !ok {
			continue
		}
		for _, r := range ris.Items[i].Status.Rotation.Restarts {
			if r.Outcome == OutcomeInProgress && r.StartedAt != nil && !r.StartedAt.Time.Before(t.CompletedAt) {
				n++
			}
		}
	}
	return n, nil
}

// patch sets the barrier on the workload's pod template, and nothing else: the admission
// policy the chart installs refuses any other change by the operator.
func (r *Reconciler) patch(ctx context.Context, w Workload, b Barrier) error {
	obj, err := newObject(w.Kind)
	if err != nil {
		return err
	}
	obj.SetNamespace(w.Namespace)
	obj.SetName(w.Name)
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{vocab.AnnotationRotatedToGeneration: b.String()}}}}})
	if err != nil {
		return err
	}
	return r.Client.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", body))
}

func (r *Reconciler) event(w Workload, typ, reason, msg string) {
	if r.Recorder == nil {
		return
	}
	obj, err := newObject(w.Kind)
	if err != nil {
		return
	}
	obj.SetNamespace(w.Namespace)
	obj.SetName(w.Name)
	r.Recorder.Eventf(obj, nil, typ, reason, "RotationRestart", "%s", msg)
}

func newObject(kind string) (client.Object, error) {
	switch kind {
	case "Deployment":
		return &appsv1.Deployment{}, nil
	case "StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "DaemonSet":
		return &appsv1.DaemonSet{}, nil
	}
	return nil, fmt.Errorf("unknown workload kind %q", kind)
}

// workloads lists the opted-in Deployments, StatefulSets and DaemonSets whose pods run
// runtime id, with their pods (from the cache, stripped by StripPod).
func (r *Reconciler) workloads(ctx context.Context, id string) ([]Workload, error) {
	pods, err := listPods(ctx, r.Client, id)
	if err != nil {
		return nil, err
	}
	var out []Workload
	// Opted in and running id (WorkloadRuntimeID).
	byRuntime := client.MatchingFields{IndexWorkloadRuntimeID: id}
	var deps appsv1.DeploymentList
	if err := r.Client.List(ctx, &deps, byRuntime, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for i := range deps.Items {
		d := &deps.Items[i]
		w := Workload{Kind: "Deployment", Namespace: d.Namespace, Name: d.Name,
			Barrier: d.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration], RolledOut: deploymentRolledOut(d),
			Priority: PriorityOf(d.Annotations[vocab.AnnotationRestartPriority])}
		if d.Spec.Paused {
			w.Deferred = "the Deployment is paused: resume it to let the restart roll out"
		}
		w.Pods = podsOf(pods.selected(w.Namespace, d.Spec.Selector), r.now())
		out = append(out, w)
	}
	var sets appsv1.StatefulSetList
	if err := r.Client.List(ctx, &sets, byRuntime, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for i := range sets.Items {
		s := &sets.Items[i]
		w := Workload{Kind: "StatefulSet", Namespace: s.Namespace, Name: s.Name,
			Barrier: s.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration], RolledOut: statefulSetRolledOut(s),
			Priority: PriorityOf(s.Annotations[vocab.AnnotationRestartPriority])}
		switch u := s.Spec.UpdateStrategy; {
		case u.Type == appsv1.OnDeleteStatefulSetStrategyType:
			w.NotApplicable = true
		case u.RollingUpdate != nil && u.RollingUpdate.Partition != nil && *u.RollingUpdate.Partition > 0:
			w.Deferred = fmt.Sprintf("the StatefulSet is partitioned at %d: pods below it would keep the old generation; lower the partition to let the restart roll out", *u.RollingUpdate.Partition)
		}
		w.Pods = podsOf(pods.selected(w.Namespace, s.Spec.Selector), r.now())
		out = append(out, w)
	}
	var dss appsv1.DaemonSetList
	if err := r.Client.List(ctx, &dss, byRuntime, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for i := range dss.Items {
		d := &dss.Items[i]
		w := Workload{Kind: "DaemonSet", Namespace: d.Namespace, Name: d.Name,
			Barrier: d.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration], RolledOut: daemonSetRolledOut(d),
			NotApplicable: d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType,
			Priority:      PriorityOf(d.Annotations[vocab.AnnotationRestartPriority])}
		w.Pods = podsOf(pods.selected(w.Namespace, d.Spec.Selector), r.now())
		out = append(out, w)
	}
	return out, nil
}

// podsOf is what Decide reads of the workload's pods.
func podsOf(pods []*corev1.Pod, now time.Time) []Pod {
	out := make([]Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, Pod{Name: p.Name, UID: p.UID, Node: p.Spec.NodeName, Created: p.CreationTimestamp.Time,
			Barrier: p.Annotations[vocab.AnnotationRotatedToGeneration], Failing: podFailing(p, now)})
	}
	return out
}

// StripPod is the pod cache's transform: rotation restarts read a pod's metadata, node and
// the few status fields that say it fails, so a cluster's pods cost little memory (no
// containers, volumes or messages).
func StripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
		ResourceVersion: p.ResourceVersion, CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		Labels: p.Labels, Annotations: p.Annotations}, Spec: corev1.PodSpec{NodeName: p.Spec.NodeName}, Status: stripStatus(p.Status)}, nil
}

func deploymentRolledOut(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want
}

func statefulSetRolledOut(s *appsv1.StatefulSet) bool {
	want := int32(1)
	if s.Spec.Replicas != nil {
		want = *s.Spec.Replicas
	}
	st := s.Status
	return st.ObservedGeneration >= s.Generation && st.UpdatedReplicas == want && st.ReadyReplicas == want &&
		st.CurrentRevision == st.UpdateRevision
}

func daemonSetRolledOut(d *appsv1.DaemonSet) bool {
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedNumberScheduled == s.DesiredNumberScheduled &&
		s.NumberAvailable == s.DesiredNumberScheduled
}

// staleAfter: how old a heartbeat may be before its node's report proves nothing.
func (r *Reconciler) staleAfter() time.Duration { return r.Beats.StaleAfterOrDefault() }

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
