package controlplane

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/internal/operator"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// With admission.userNamespaces Required, the API server stores every new Brewlet pod with
// hostUsers: false, whether the pod left it out or asked for it, and refuses one that asks
// for the node's user namespace; other pods are not the webhook's.
func TestUserNamespacePolicyAtAdmission(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	ctx, c := context.Background(), cp.Client
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: admissionNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: admissionNS}},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: vocab.RuntimeClassName}, Handler: vocab.RuntimeClassName},
		kit.RuntimeImage("python-3.12", "registry.example/runtimes/python@"+kit.GoodDigest),
		&brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}, Spec: brewletv1.NodeProfileSpec{
			NodePool: brewletv1.NodePool{Key: offersPoolKey, Names: []string{"general"}}, RuntimeImages: []brewletv1.OfferedRuntime{{ID: "python-3.12"}}}},
	} {
		kit.Must(t, c.Create(ctx, obj))
	}
	port := framework.FreePort(t)
	startOperatorWith(t, cp, func(o *operator.Options) {
		o.ProbeAddress = "0"
		o.Admission = admission.Options{Host: "127.0.0.1", Port: port, CertDir: t.TempDir(), Namespace: "brewlet-system",
			Hosts: []string{"127.0.0.1"}, UserNamespaces: admission.UserNamespacesRequired}
	})
	installWebhook(t, c, port)
	kit.Eventually(t, 30*time.Second, "python-3.12 approved", func() (bool, string) {
		a := approved(getRI(t, c, "python-3.12"))
		return a != nil && a.Status == metav1.ConditionTrue, "not yet"
	})

	for name, hostUsers := range map[string]*bool{"unset": nil, "false": ptr.To(false)} {
		pod := admissionPod("userns-"+name, "python-3.12", func(p *corev1.Pod) { p.Spec.HostUsers = hostUsers })
		kit.Must(t, c.Create(ctx, pod))
		if h := pod.Spec.HostUsers; h == nil || *h {
			t.Errorf("pod with hostUsers %s stored with %v", name, h)
		}
	}
	err := c.Create(ctx, admissionPod("userns-true", "python-3.12", func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(true) }))
	if err == nil || !strings.Contains(err.Error(), string(vocab.ReasonPrivilegeNotSupported)+": ") || !strings.Contains(err.Error(), "hostUsers: true") {
		t.Fatalf("a Brewlet pod with hostUsers: true under Required: %v", err)
	}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "not-brewlet", Namespace: admissionNS},
		Spec: corev1.PodSpec{HostUsers: ptr.To(true), Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}}}
	kit.Must(t, c.Create(ctx, other))
}
