package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// A node an autoscaler adds to a Brewlet pool from a template (docs/install.md,
// "Autoscalers"): it registers with the pool label, the scheduling labels the template
// promised (what lets the autoscaler's simulation fit a pending Brewlet pod) and the
// startup taint. A real scheduler keeps the Brewlet pod off the node while the taint is
// there; the node's agent keeps the taint while the runtime's install is stalled at the
// registry, and removes it (and only it) once the runtime is installed and authorized, after
// which the pod is bound to the node.
func TestAgentStartupTaintHoldsPodsUntilTheRuntimeIsReady(t *testing.T) {
	w := newAgentWorldWith(t, framework.ControlPlaneOptions{Scheduler: true})
	c := w.cp.Client
	ctx := context.Background()
	startup := corev1.Taint{Key: vocab.TaintRuntimeNotReady, Effect: corev1.TaintEffectNoSchedule}
	other := corev1.Taint{Key: "example.com/dedicated", Value: "brewlet", Effect: corev1.TaintEffectPreferNoSchedule}

	// The node as Karpenter registers it from a NodePool whose template carries the labels
	// and startupTaints of docs/install.md, with room for pods.
	node := &corev1.Node{}
	kit.Must(t, c.Get(ctx, client.ObjectKey{Name: w.nodeName}, node))
	node.Labels[vocab.LabelRuntime] = vocab.LabelValueReady
	node.Labels[vocab.RuntimeLabel(kit.PyID)] = vocab.LabelValueReady
	node.Spec.Taints = []corev1.Taint{startup, other}
	kit.Must(t, c.Update(ctx, node))
	capacity := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10"), corev1.ResourceCPU: resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("4Gi")}
	node.Status = corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), Reason: "KubeletReady"}}}
	kit.Must(t, c.Status().Update(ctx, node))

	proxy := startStallProxy(t, w.reg)
	_, path, _ := strings.Cut(w.refs["python1"], "/")
	w.offer(t, map[string]string{kit.PyID: proxy.addr + "/" + path})
	kit.Eventually(t, time.Minute, "RuntimeClass brewlet", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKey{Name: vocab.RuntimeClassName}, &nodev1.RuntimeClass{})
		return err == nil, fmt.Sprint(err)
	})

	// The pod the scale-up was for, with the per-ID selector pod admission gives it (no
	// controller-manager here: its service account is made by hand).
	kit.Must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}))
	rc := vocab.RuntimeClassName
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"}, Spec: corev1.PodSpec{
		RuntimeClassName: &rc, NodeSelector: map[string]string{vocab.RuntimeLabel(kit.PyID): vocab.LabelValueReady},
		Containers: []corev1.Container{{Name: "app", Image: "registry.example/app@sha256:" + strings.Repeat("a", 64)}}}}
	kit.Must(t, c.Create(ctx, pod))
	unscheduled := func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		if pod.Spec.NodeName != "" {
			t.Fatalf("pod bound to %s while the node still has its startup taint", pod.Spec.NodeName)
		}
		for _, cond := range pod.Status.Conditions {
			// The scheduler does not name the key; the node's one NoSchedule taint is the
			// startup taint (the other prefers, it does not filter).
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && strings.Contains(cond.Message, "untolerated taint") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %+v", pod.Status.Conditions)
	}
	kit.Eventually(t, time.Minute, "the scheduler to refuse the node for its taint", unscheduled)

	a := w.agent(t, time.Minute, time.Second)
	a.StartupTaints = []string{vocab.TaintRuntimeNotReady}
	stop := run(a)
	defer stop()
	select {
	case <-proxy.stalled:
	case <-time.After(2 * time.Minute):
		t.Fatal("the install never reached a layer blob")
	}
	// Several passes with the install in flight: the node reports Installing and keeps its
	// taint; the pod stays where it was.
	nrt := &brewletv1.NodeRuntime{}
	kit.Eventually(t, time.Minute, "NodeRuntime to report the install", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKey{Name: w.nodeName}, nrt); err != nil {
			return false, err.Error()
		}
		return len(nrt.Status.Runtimes) == 1 && nrt.Status.Runtimes[0].State == string(vocab.StateInstalling), fmt.Sprintf("%+v", nrt.Status.Runtimes)
	})
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		kit.Must(t, c.Get(ctx, client.ObjectKey{Name: w.nodeName}, node))
		if !slices.ContainsFunc(node.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == startup.Key }) {
			t.Fatalf("startup taint removed while the runtime was installing: %+v", node.Spec.Taints)
		}
		kit.Must(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
		if pod.Spec.NodeName != "" {
			t.Fatalf("pod bound to %s while the runtime was installing", pod.Spec.NodeName)
		}
	}

	close(proxy.release)
	kit.Eventually(t, 3*time.Minute, "the pod to be bound once the runtime is ready", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		return pod.Spec.NodeName == w.nodeName, fmt.Sprintf("pod on %q, conditions %+v", pod.Spec.NodeName, pod.Status.Conditions)
	})
	// The agent reports and labels before it removes the taint: by the time the pod could
	// be bound, the runtime was ready and authorized.
	kit.Must(t, c.Get(ctx, client.ObjectKey{Name: w.nodeName}, nrt))
	if len(nrt.Status.Runtimes) != 1 || nrt.Status.Runtimes[0].State != string(vocab.StateReady) {
		t.Errorf("pod bound with NodeRuntime %+v", nrt.Status.Runtimes)
	}
	auth, err := w.host.ReadAuthorization(kit.PyID)
	if err != nil || auth.Check(time.Now()) != nil {
		t.Errorf("pod bound without an authorization on the node: %+v, %v", auth, err)
	}
	kit.Must(t, c.Get(ctx, client.ObjectKey{Name: w.nodeName}, node))
	if len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != other.Key || node.Labels[vocab.LabelRuntime] != vocab.LabelValueReady {
		t.Errorf("node after release: taints %+v labels %v (only the startup taint may go)", node.Spec.Taints, node.Labels)
	}
}
