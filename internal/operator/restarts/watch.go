package restarts

import (
	"context"
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// IndexPodRuntimeID indexes pods by the runtime ID their annotation names: a pass reads
// one runtime's pods, not the cluster's.
const IndexPodRuntimeID = "metadata.annotations.runtime-image"

// PodRuntimeID is the index function of IndexPodRuntimeID.
func PodRuntimeID(o client.Object) []string {
	if id := o.GetAnnotations()[vocab.AnnotationRuntimeImage]; id != "" {
		return []string{id}
	}
	return nil
}

// IndexWorkloadRuntimeID indexes Deployments, StatefulSets and DaemonSets that opted in by
// the runtime ID their pod template names: a pass reads the workloads it may restart, not
// every workload of the cluster.
const IndexWorkloadRuntimeID = "spec.template.metadata.annotations.runtime-image.opted-in"

// WorkloadRuntimeID is the index function of IndexWorkloadRuntimeID. The index is exact:
// a pass takes what it returns without checking again.
func WorkloadRuntimeID(o client.Object) []string {
	if id := templateRuntimeID(o); id != "" && o.GetAnnotations()[vocab.AnnotationRestartOnRotation] == "true" {
		return []string{id}
	}
	return nil
}

// templateRuntimeID is the runtime a workload's pod template names ("" for none, or for
// anything but a Deployment, StatefulSet or DaemonSet).
func templateRuntimeID(o client.Object) string {
	var tmpl map[string]string
	switch w := o.(type) {
	case *appsv1.Deployment:
		tmpl = w.Spec.Template.Annotations
	case *appsv1.StatefulSet:
		tmpl = w.Spec.Template.Annotations
	case *appsv1.DaemonSet:
		tmpl = w.Spec.Template.Annotations
	}
	return tmpl[vocab.AnnotationRuntimeImage]
}

// A pass is a few hundred milliseconds of work on a large fleet and every restart slot waits
// for the pass after its rollout finished; updates that cannot change a decision must not
// queue passes in front of it. The predicates below let through only what Decide reads.

// targetChanged: the RuntimeImage's restart target (the records are this controller's own
// writes; counts and observations belong to the RuntimeImage controller).
var targetChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*brewletv1.RuntimeImage)
	n, ok2 := e.ObjectNew.(*brewletv1.RuntimeImage)
	if !ok1 || !ok2 {
		return true
	}
	to, okO := TargetOf(o)
	tn, okN := TargetOf(n)
	return okO != okN || to != tn || deleting(o) != deleting(n)
}}

// reportChanged: a node's report (status), not the spec the operator writes to it.
var reportChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*brewletv1.NodeRuntime)
	n, ok2 := e.ObjectNew.(*brewletv1.NodeRuntime)
	return !ok1 || !ok2 || !equality.Semantic.DeepEqual(&o.Status, &n.Status)
}}

// workloadChanged: the spec (its generation), the opt-in, or whether it is rolled out. The
// controller-manager writes a rollout's status several times; only its end matters.
var workloadChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() || deleting(o) != deleting(n) ||
		o.GetAnnotations()[vocab.AnnotationRestartOnRotation] != n.GetAnnotations()[vocab.AnnotationRestartOnRotation] ||
		rolledOut(o) != rolledOut(n)
}}

// podChanged: what a pass reads of a pod (every status change of the full object arrives as
// an update; of the status, only a container starting or stopping to fail wakes a pass, so
// a crash loop is seen at once; readiness past its grace is seen by the pass that runs
// every 15 s while restarts are in progress).
var podChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*corev1.Pod)
	n, ok2 := e.ObjectNew.(*corev1.Pod)
	return !ok1 || !ok2 || o.Spec.NodeName != n.Spec.NodeName || deleting(o) != deleting(n) ||
		o.Annotations[vocab.AnnotationRuntimeImage] != n.Annotations[vocab.AnnotationRuntimeImage] || !maps.Equal(o.Labels, n.Labels) ||
		podFailing(o, time.Time{}) != podFailing(n, time.Time{})
}}

func deleting(o metav1.Object) bool { return o.GetDeletionTimestamp() != nil }

func rolledOut(o client.Object) bool {
	switch w := o.(type) {
	case *appsv1.Deployment:
		return deploymentRolledOut(w)
	case *appsv1.StatefulSet:
		return statefulSetRolledOut(w)
	case *appsv1.DaemonSet:
		return daemonSetRolledOut(w)
	}
	return false
}

// podGroups holds one runtime's live pods by namespace and by namespace and label, so each
// workload's selector is tried on the pods that carry one of its labels rather than on
// every pod of its namespace (W workloads x P pods per pass otherwise).
type podGroups struct {
	byNS    map[string][]*corev1.Pod
	byLabel map[nsLabel][]*corev1.Pod
}

type nsLabel struct{ ns, key, value string }

func groupPods(pods []corev1.Pod) podGroups {
	g := podGroups{byNS: map[string][]*corev1.Pod{}, byLabel: map[nsLabel][]*corev1.Pod{}}
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		g.byNS[p.Namespace] = append(g.byNS[p.Namespace], p)
		for k, v := range p.Labels {
			g.byLabel[nsLabel{p.Namespace, k, v}] = append(g.byLabel[nsLabel{p.Namespace, k, v}], p)
		}
	}
	return g
}

// selected returns the pods of namespace ns that selector selects; an unusable or empty
// selector selects nothing (the API server refuses such workloads).
func (g podGroups) selected(ns string, selector *metav1.LabelSelector) []*corev1.Pod {
	if selector == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil || sel.Empty() {
		return nil
	}
	candidates := g.byNS[ns]
	if len(selector.MatchLabels) > 0 {
		k := slices.Min(slices.Collect(maps.Keys(selector.MatchLabels)))
		candidates = g.byLabel[nsLabel{ns, k, selector.MatchLabels[k]}]
	}
	var out []*corev1.Pod
	for _, p := range candidates {
		if sel.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out
}

// listPods reads runtime id's pods from the cache (stripped by StripPod, read-only).
func listPods(ctx context.Context, c client.Reader, id string) (podGroups, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.MatchingFields{IndexPodRuntimeID: id}, client.UnsafeDisableDeepCopy); err != nil {
		return podGroups{}, err
	}
	return groupPods(pods.Items), nil
}

// slotFreed wakes the other RuntimeImages with pending restarts when one RuntimeImage's
// restarts in progress drop: maxConcurrent is shared by every runtime, and targetChanged
// keeps such record changes from waking anything else.
func slotFreed(c client.Reader) handler.EventHandler {
	return handler.Funcs{UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if inProgress(e.ObjectNew) >= inProgress(e.ObjectOld) {
			return
		}
		var ris brewletv1.RuntimeImageList
		if err := c.List(ctx, &ris, client.UnsafeDisableDeepCopy); err != nil {
			return // the waiting runtimes look again after their requeue interval
		}
		for _, name := range waitingForSlot(e.ObjectNew.GetName(), ris.Items) {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
	}}
}

// waitingForSlot names the RuntimeImages other than freed with restarts pending.
func waitingForSlot(freed string, ris []brewletv1.RuntimeImage) []string {
	var out []string
	for i := range ris {
		if rc := restartCounts(&ris[i]); ris[i].Name != freed && rc != nil && rc.Pending > 0 {
			out = append(out, ris[i].Name)
		}
	}
	return out
}

func restartCounts(o client.Object) *brewletv1.RestartCounts {
	ri, ok := o.(*brewletv1.RuntimeImage)
	if !ok || ri.Status.Rotation == nil {
		return nil
	}
	return ri.Status.Rotation.RestartCounts
}

func inProgress(o client.Object) int32 {
	if rc := restartCounts(o); rc != nil {
		return rc.InProgress
	}
	return 0
}
