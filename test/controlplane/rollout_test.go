package controlplane

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The optional components work together: kube-controller-manager turns a Deployment into
// pods, kube-scheduler places them on kwok's fake nodes, and a rollout completes. Rotation
// restarts are tested on exactly this stack.
func TestControlPlaneRolloutOnFakeNodes(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{
		ControllerManager: true, Scheduler: true, Kwok: true, KwokNodes: 2, SkipCRDs: true,
	})
	ctx, c := context.Background(), cp.Client
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:  []corev1.Container{{Name: "web", Image: "registry.invalid/web@sha256:" + kit.GoodDigest[7:]}},
					Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
				},
			},
		},
	}
	if err := c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	waitRolledOut := func(generation int64) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			got := &appsv1.Deployment{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(d), got); err != nil {
				return false, err
			}
			s := got.Status
			return s.ObservedGeneration >= generation && s.UpdatedReplicas == 3 && s.AvailableReplicas == 3 && s.Replicas == 3, nil
		})
		if err != nil {
			out, _ := cp.Kubectl(t, "get", "deploy,rs,pods,nodes", "-o", "wide")
			t.Fatalf("deployment generation %d not rolled out: %v\n%s", generation, err, out)
		}
	}
	waitRolledOut(1)
	// A pod-template annotation change (what a rotation restart sets) rolls every pod.
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Template.Annotations = map[string]string{"example.com/restarted": "1"}
	if err := c.Patch(ctx, d, patch); err != nil {
		t.Fatal(err)
	}
	waitRolledOut(2)
}
