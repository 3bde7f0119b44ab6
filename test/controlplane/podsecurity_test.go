package controlplane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// TestPodSecurityAdmission: in namespaces whose Pod Security label enforces restricted or
// baseline, the API server's own PodSecurity admission (on by default in kube-apiserver)
// admits Brewlet pods that carry no securityContext at all, because pod admission (a
// mutating webhook, run before validating admission) sets the fields the shim enforces
// anyway. A Deployment's pod, a bare pod and an ephemeral container added through the
// ephemeralcontainers subresource (kubectl debug); the Deployment's template stays as
// written (no drift for GitOps). The control, the same pod of another RuntimeClass, is
// refused by Pod Security, so the test sees a real enforcement.
func TestPodSecurityAdmission(t *testing.T) {
	// The controller-manager turns the Deployment into pods and creates the namespaces'
	// default ServiceAccounts. No scheduler: admission is what is judged.
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{ControllerManager: true})
	ctx, c := context.Background(), cp.Client
	levels := map[string]string{"psa-restricted": "restricted", "psa-baseline": "baseline"}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-system"}},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: vocab.RuntimeClassName}, Handler: vocab.RuntimeClassName},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: "runc"},
	}
	for ns, level := range levels {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/enforce-version": "latest"}}})
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	startPodSecurityWebhook(t, cp)

	plain := func(name, ns string) *corev1.Pod {
		p := admissionPod(name, "python-3.12")
		p.Namespace = ns
		return p
	}
	for ns := range levels {
		kit.Eventually(t, 60*time.Second, "default ServiceAccount in "+ns, func() (bool, string) {
			err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
			return err == nil, fmt.Sprint(err)
		})
	}
	// The API server loads webhook configurations asynchronously: wait until a pod of
	// the restricted namespace is admitted, which also means restricted passed.
	kit.Eventually(t, 30*time.Second, "webhook in effect", func() (bool, string) {
		err := c.Create(ctx, plain("probe", "psa-restricted"))
		return err == nil, fmt.Sprint(err)
	})

	t.Run("control: another RuntimeClass is refused by restricted", func(t *testing.T) {
		p := plain("runc", "psa-restricted")
		p.Spec.RuntimeClassName = ptr.To("runc")
		err := c.Create(ctx, p)
		kit.ExpectDenied(t, err, `violates PodSecurity "restricted:latest"`)
		for _, want := range []string{"allowPrivilegeEscalation != false", "unrestricted capabilities", "runAsNonRoot != true", "seccompProfile"} {
			kit.ExpectDenied(t, err, want)
		}
	})

	for ns, level := range levels {
		t.Run("bare pod admitted by "+level, func(t *testing.T) {
			p := plain("bare", ns)
			if err := c.Create(ctx, p); err != nil {
				t.Fatalf("Brewlet pod without securityContext refused in a %s namespace: %v", level, err)
			}
			got := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
				t.Fatal(err)
			}
			checkPodSecurityFields(t, got)
		})

		t.Run("Deployment's pod admitted by "+level+", template untouched", func(t *testing.T) {
			labels := map[string]string{"app": "web"}
			tmpl := plain("", ns)
			dep := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](1),
					Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: tmpl.Annotations}, Spec: tmpl.Spec},
				},
			}
			if err := c.Create(ctx, dep); err != nil {
				t.Fatal(err)
			}
			var pod *corev1.Pod
			kit.Eventually(t, 60*time.Second, "the Deployment's pod created", func() (bool, string) {
				pods := &corev1.PodList{}
				if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
					return false, err.Error()
				}
				if len(pods.Items) > 0 {
					pod = &pods.Items[0]
					return true, ""
				}
				// A refusal shows up on the ReplicaSet as ReplicaFailure.
				rss := &appsv1.ReplicaSetList{}
				_ = c.List(ctx, rss, client.InNamespace(ns), client.MatchingLabels(labels))
				return false, fmt.Sprintf("no pod; ReplicaSets %+v", rss.Items)
			})
			checkPodSecurityFields(t, pod)
			got := &appsv1.Deployment{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(dep), got); err != nil {
				t.Fatal(err)
			}
			// The API server defaults the template's pod securityContext to {}: only the
			// fields pod admission writes are compared.
			ts := got.Spec.Template.Spec
			psc := ts.SecurityContext
			if got.Generation != 1 || ts.Containers[0].SecurityContext != nil || ts.Affinity != nil ||
				(psc != nil && (psc.RunAsNonRoot != nil || psc.RunAsUser != nil || psc.RunAsGroup != nil || psc.SeccompProfile != nil)) {
				t.Fatalf("the Deployment changed (generation %d): template securityContext %+v, container %+v, affinity %+v",
					got.Generation, ts.SecurityContext, ts.Containers[0].SecurityContext, ts.Affinity)
			}
		})
	}

	t.Run("ephemeral container admitted by restricted", func(t *testing.T) {
		pod := &corev1.Pod{}
		key := types.NamespacedName{Namespace: "psa-restricted", Name: "bare"}
		// What kubectl debug sends: a container without securityContext. The controller-
		// manager may write the pod meanwhile: retry on conflict from the latest version.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, key, pod); err != nil {
				return err
			}
			pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}})
			return c.SubResource("ephemeralcontainers").Update(ctx, pod)
		}); err != nil {
			t.Fatalf("ephemeral container refused: %v", err)
		}
		if err := c.Get(ctx, key, pod); err != nil {
			t.Fatal(err)
		}
		if n := len(pod.Spec.EphemeralContainers); n != 1 {
			t.Fatalf("%d ephemeral containers", n)
		}
		checkContainerFields(t, "debug", pod.Spec.EphemeralContainers[0].SecurityContext)
		// A second one: the first, already in the pod, must not be patched (the API server
		// refuses changes to an existing ephemeral container).
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, key, pod); err != nil {
				return err
			}
			pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug2", Image: "busybox"}})
			return c.SubResource("ephemeralcontainers").Update(ctx, pod)
		}); err != nil {
			t.Fatalf("second ephemeral container refused: %v", err)
		}
	})

	t.Run("contradictions refused by the webhook, naming the field", func(t *testing.T) {
		p := plain("contra", "psa-baseline")
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(false),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		err := c.Create(ctx, p)
		kit.ExpectDenied(t, err, fmt.Sprintf("admission webhook %q denied the request: %s: spec.securityContext.runAsNonRoot is false",
			admission.WebhookName, vocab.ReasonRootNotSupported))
		kit.ExpectDenied(t, err, string(vocab.ReasonPrivilegeNotSupported)+`: spec.securityContext.seccompProfile.type is "Unconfined"`)
	})
}

// startPodSecurityWebhook runs the operator with pod admission, installs the webhook
// configuration, an approved RuntimeImage python-3.12 and a NodeProfile offering it, and
// waits for the caBundle.
func startPodSecurityWebhook(t *testing.T, cp *framework.ControlPlane) {
	t.Helper()
	ctx, c := context.Background(), cp.Client
	port, _ := admissionOperator(t, cp)
	installWebhook(t, c, port)
	py := kit.RuntimeImage("python-3.12", "registry.example/runtimes/python@"+kit.GoodDigest)
	py.Spec.User = brewletv1.RuntimeUser{UID: 10001, GID: 10002}
	if err := c.Create(ctx, py); err != nil {
		t.Fatal(err)
	}
	// Offered to a pool: a runtime no pool offers is refused at admission.
	kit.Must(t, c.Create(ctx, &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}, Spec: brewletv1.NodeProfileSpec{
		NodePool: brewletv1.NodePool{Key: offersPoolKey, Names: []string{"general"}}, RuntimeImages: []brewletv1.OfferedRuntime{{ID: "python-3.12"}}}}))
	kit.Eventually(t, 30*time.Second, "python-3.12 approved by the operator", func() (bool, string) {
		a := approved(getRI(t, c, "python-3.12"))
		return a != nil && a.Status == metav1.ConditionTrue, fmt.Sprint(a)
	})
}

// checkPodSecurityFields: what pod admission wrote, read back from the API server.
func checkPodSecurityFields(t *testing.T, p *corev1.Pod) {
	t.Helper()
	s := p.Spec.SecurityContext
	if s == nil || s.RunAsNonRoot == nil || !*s.RunAsNonRoot || s.RunAsUser == nil || *s.RunAsUser != 10001 ||
		s.SeccompProfile == nil || s.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("pod %s securityContext %+v: want runAsNonRoot, runAsUser 10001, seccomp RuntimeDefault", p.Name, s)
	}
	for _, ct := range p.Spec.Containers {
		checkContainerFields(t, ct.Name, ct.SecurityContext)
	}
}

func checkContainerFields(t *testing.T, name string, s *corev1.SecurityContext) {
	t.Helper()
	if s == nil || s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation || s.Capabilities == nil ||
		strings.Join(capNames(s.Capabilities.Drop), ",") != "ALL" {
		t.Fatalf("container %s securityContext %+v: want allowPrivilegeEscalation false, drop [ALL]", name, s)
	}
}

func capNames(cs []corev1.Capability) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return out
}
