package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// chartOperatorCanI asks the API server's authorizer for the rights the chart's RBAC gives
// the operator.
func chartOperatorCanI(t *testing.T, cp *framework.ControlPlane) {
	const ns = kit.ChartNS
	asOp := "system:serviceaccount:" + ns + ":brewlet-operator"
	for _, q := range []struct {
		args []string
		want string
	}{
		{[]string{"update", "runtimeimages.node.brewlet.sh", "--subresource=status"}, "yes"},
		{[]string{"update", "nodeprofiles.node.brewlet.sh", "--subresource=status"}, "yes"},
		{[]string{"create", "noderuntimes.node.brewlet.sh"}, "yes"},
		{[]string{"update", "noderuntimes.node.brewlet.sh", "--subresource=status"}, "no"},
		{[]string{"update", "runtimeimages.node.brewlet.sh", "--subresource=finalizers"}, "yes"},
		{[]string{"delete", "runtimeimages.node.brewlet.sh"}, "no"},
		{[]string{"patch", "nodes"}, "no"},
		{[]string{"delete", "runtimeclasses.node.k8s.io/brewlet"}, "yes"},
		{[]string{"delete", "runtimeclasses.node.k8s.io/kata"}, "no"},
		{[]string{"update", "mutatingwebhookconfigurations/" + admission.ConfigurationName}, "yes"},
		{[]string{"update", "mutatingwebhookconfigurations/other"}, "no"},
		{[]string{"get", "secrets/" + admission.SecretName, "-n", ns}, "yes"},
		{[]string{"get", "secrets/other", "-n", ns}, "no"},
		{[]string{"list", "secrets", "-n", ns}, "no"},
		{[]string{"get", "secrets/" + admission.SecretName, "-n", "default"}, "no"},
		{[]string{"update", "leases/brewlet-operator", "-n", ns}, "yes"},
		{[]string{"update", "leases/brewlet-provisioner-n1", "-n", ns}, "no"},
		{[]string{"watch", "leases", "-n", ns}, "yes"},
		{[]string{"list", "leases", "-n", "default"}, "no"},
		{[]string{"create", "events.events.k8s.io", "-n", "default"}, "yes"},
	} {
		if got := cp.CanI(t, asOp, q.args...); got != q.want {
			t.Errorf("operator can-i %v: %q, want %q", q.args, got, q.want)
		}
	}
}

// chartOperatorUnderRBAC runs the brewlet-operator binary as its own process (the flags
// of the chart's Deployment, loopback ports) whose only credential is a token of the
// chart's operator service account, and waits for what each of its controllers writes: so
// every verb the operator uses is proven granted, not only listed.
func chartOperatorUnderRBAC(t *testing.T, cp *framework.ControlPlane) {
	ctx, c := context.Background(), cp.Client
	// Ready: informers synced and the pod admission certificate (its Secret, by name)
	// loaded.
	op := kit.StartOperatorProcess(t, cp, kit.OperatorSAToken(t, cp), kit.ChartNS)
	defer op.StopCleanly(t, 30*time.Second)
	wait := func(what string, cond func() (bool, string)) {
		t.Helper()
		kit.Eventually(t, 60*time.Second, what+" under the chart's operator RBAC", cond)
	}

	ri := kit.RuntimeImage("python-3.12", "registry.example/runtimes/python@"+kit.GoodDigest)
	if err := c.Create(ctx, ri); err != nil {
		t.Fatal(err)
	}
	np := &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}, Spec: brewletv1.NodeProfileSpec{
		NodePool:      brewletv1.NodePool{Key: "node-restriction.kubernetes.io/pool", Names: []string{"general"}},
		RuntimeImages: []brewletv1.OfferedRuntime{{ID: "python-3.12"}}}}
	if err := c.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	// Leader Lease (Role, by name).
	wait("the leader Lease", func() (bool, string) {
		l := &coordinationv1.Lease{}
		err := c.Get(ctx, client.ObjectKey{Namespace: kit.ChartNS, Name: "brewlet-operator"}, l)
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", fmt.Sprint(err)
	})
	// RuntimeImage: finalizer (update) and status.
	wait("RuntimeImage generation 1 with its finalizer", func() (bool, string) {
		got := &brewletv1.RuntimeImage{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(ri), got); err != nil {
			return false, err.Error()
		}
		return got.Status.Generation == 1 && len(got.Finalizers) > 0, fmt.Sprintf("%+v %v", got.Status, got.Finalizers)
	})
	// NodeProfile status, NodeRuntime spec (create for n1, whose agent never ran; update
	// for n2, created earlier), RuntimeClass.
	wait("NodeProfile status and NodeRuntime specs", func() (bool, string) {
		got := &brewletv1.NodeProfile{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(np), got); err != nil {
			return false, err.Error()
		}
		for _, n := range []string{"n1", "n2"} {
			nrt := &brewletv1.NodeRuntime{}
			if err := c.Get(ctx, client.ObjectKey{Name: n}, nrt); err != nil || len(nrt.Spec.Runtimes) == 0 {
				return false, fmt.Sprintf("NodeRuntime %s: %v %+v", n, err, nrt.Spec)
			}
		}
		return got.Status.AssignedNodes == 2, fmt.Sprintf("%+v", got.Status)
	})
	wait("RuntimeClass brewlet", func() (bool, string) {
		rc := &nodev1.RuntimeClass{}
		err := c.Get(ctx, client.ObjectKey{Name: "brewlet"}, rc)
		return err == nil && rc.Handler == "brewlet", fmt.Sprint(err)
	})
	// Pod admission: the certificate Secret (Role, by name) and the caBundle (ClusterRole,
	// by name).
	wait("the webhook certificate and caBundle", func() (bool, string) {
		sec := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: kit.ChartNS, Name: admission.SecretName}, sec); err != nil {
			return false, err.Error()
		}
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: admission.ConfigurationName}, mwc); err != nil {
			return false, err.Error()
		}
		ca := mwc.Webhooks[0].ClientConfig.CABundle
		if len(ca) == 0 || !bytes.Equal(ca, sec.Data["ca.crt"]) {
			return false, fmt.Sprintf("caBundle %d bytes", len(ca))
		}
		// ... and the process serves the Secret's certificate, for the Service's name.
		err := op.WebhookServes(ca, admission.ServiceName+"."+kit.ChartNS+".svc")
		return err == nil, fmt.Sprintf("webhook at %s: %v", op.WebhookAddr, err)
	})
	// The Secret the serving process reads holds no key that can sign for the webhook.
	if problem, err := admissionSecretProblem(ctx, c, nil); err != nil || problem != "" {
		t.Errorf("the webhook certificate Secret written under the chart's RBAC: %s %v", problem, err)
	}
	if _, err := kit.ScrapeMetrics(t, cp, op.MetricsAddr); err != nil {
		t.Errorf("operator metrics: %v", err)
	}
	// The finalizer is released on deletion (update of the object, a fresh list of
	// NodeRuntimes): no node reports the epoch.
	if err := c.Delete(ctx, ri); err != nil {
		t.Fatal(err)
	}
	wait("RuntimeImage deleted", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(ri), &brewletv1.RuntimeImage{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
