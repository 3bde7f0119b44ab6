package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/firsthour"
	"brewlet.sh/brewlet/test/kit"
)

// A web app with hostUsers: false on RuntimeClass brewlet, on a node whose /var/lib holds a
// tmpfs, a loop-mounted ext4 and a ramfs (which cannot be idmapped): it answers through its
// Service, its HTTP and exec probes pass, `kubectl exec` runs in the pod's user namespace as
// the runtime's user, the runtime's files are the pod's root's, nothing on the node is left
// idmapped, and the node's lease sees the container.
func firstHourUserNamespaces(t *testing.T, f *firsthour.Flow) {
	ctx := context.Background()
	host := hoststate.Under(f.C.Node.HostPrefix)
	volumes := kit.MountNodeVolumes(t, filepath.Join(f.C.Node.HostPrefix, "var", "lib"))

	const name = "userns-web"
	labels := map[string]string{"app": name}
	no := false
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: firsthour.AppNamespace},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{vocab.AnnotationRuntimeImage: firsthour.RuntimeID}},
				Spec: corev1.PodSpec{RuntimeClassName: ptr.To(vocab.RuntimeClassName), AutomountServiceAccountToken: &no,
					HostUsers: &no,
					Containers: []corev1.Container{{Name: "web", Image: f.AppImage,
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{PeriodSeconds: 2, ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}},
						LivenessProbe: &corev1.Probe{PeriodSeconds: 5, ProbeHandler: corev1.ProbeHandler{
							Exec: &corev1.ExecAction{Command: []string{"python", "-c", "import os; assert os.getuid() == 10001"}}}}}}}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: firsthour.AppNamespace},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
	for _, o := range []client.Object{d, svc} {
		if err := f.Clients.CL.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = f.Clients.CL.Delete(ctx, svc)
		_ = f.Clients.CL.Delete(ctx, d, client.PropagationPolicy(metav1.DeletePropagationForeground))
		kit.Eventually(t, 2*time.Minute, "the user-namespaced pods gone", func() (bool, string) {
			pods := &corev1.PodList{}
			_ = f.Clients.CL.List(ctx, pods, client.InNamespace(firsthour.AppNamespace), client.MatchingLabels(labels))
			return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items))
		})
	})
	if err := f.WaitDeployment(ctx, name); err != nil {
		t.Fatal(err)
	}

	body, err := f.Clients.CS.CoreV1().Services(firsthour.AppNamespace).ProxyGet("http", name, "http", "/", nil).DoRaw(ctx)
	if err != nil || !strings.Contains(string(body), "hello from") {
		t.Fatalf("GET through the Service: %v\n%s", err, body)
	}
	t.Logf("GET http://%s.%s/ → %s", name, firsthour.AppNamespace, strings.TrimSpace(string(body)))

	pods := &corev1.PodList{}
	if err := f.Clients.CL.List(ctx, pods, client.InNamespace(firsthour.AppNamespace), client.MatchingLabels(labels)); err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v %d", err, len(pods.Items))
	}
	pod := pods.Items[0]
	out, err := f.Kubectl(ctx, "-n", firsthour.AppNamespace, "exec", pod.Name, "--", "python", "-c", `import os
print("uid_map", " ".join(open("/proc/self/uid_map").read().split()))
print("id", os.getuid(), os.getgid())
print("runtime", os.stat("/usr/bin/python3").st_uid)`)
	if err != nil {
		t.Fatalf("kubectl exec: %v\n%s", err, out)
	}
	t.Logf("kubectl exec in the pod:\n%s", out)
	var fields []string
	for _, l := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(l, "uid_map "); ok {
			fields = strings.Fields(m)
		}
	}
	if len(fields) != 3 || fields[0] != "0" || fields[1] == "0" || fields[2] != "65536" {
		t.Errorf("the pod is not in a user namespace of its own: uid_map %v", fields)
	}
	for _, want := range []string{"id 10001 10001", "runtime 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl exec output lacks %q", want)
		}
	}

	cid := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if _, err := host.Lease(cid); err != nil {
		t.Errorf("the node's lease does not see container %s: %v", cid, err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 5 && slices.Contains(strings.Split(f[5], ","), "idmapped") {
			t.Errorf("an idmapped mount is attached on the node: %s", l)
		}
	}
	for _, v := range volumes {
		if !strings.Contains(string(mi), " "+v+" ") {
			t.Errorf("volume %s is gone", v)
		}
	}
}
