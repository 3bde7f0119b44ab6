package kubelet

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// A real kubelet, registered with a real control plane, runs pods that the real scheduler
// placed on it: a plain busybox pod (with its service-account volume, a tmpfs the kubelet
// mounts in its own mount namespace), then a Brewlet pod whose image holds only /app and
// runs on the node's CPython runtime. Logs are read through the API server, which reaches
// the kubelet with its client certificate. The host's kernel tunables are the same before,
// during and after.
func TestKubeletRunsPods(t *testing.T) {
	before, err := framework.HostSysctls()
	if err != nil {
		t.Fatal(err)
	}
	// Host paths a kubelet writes on its own unless shadowed; those absent now stay absent.
	var absent []string
	for _, p := range []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/usr/libexec/kubernetes/kubelet-plugins"} {
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			absent = append(absent, p)
		}
	}
	// Registered first, so it runs last: after the kubelet and the node are gone.
	t.Cleanup(func() {
		expectSysctls(t, before, "after the kubelet ran")
		for _, p := range absent {
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Errorf("the kubelet created %s on the host", p)
			}
		}
	})

	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{ControllerManager: true, Scheduler: true})
	kn := framework.StartKubeletNode(t, cp, framework.KubeletOptions{Labels: map[string]string{"e2e.brewlet.sh/kubelet": "yes"}})
	expectSysctls(t, before, "while the kubelet runs")
	seen, err := kn.KubeletSysctls()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range framework.KernelTunables {
		if seen[k] != v {
			t.Errorf("kubelet sees %s=%s; the shadow holds %s", k, seen[k], v)
		}
	}
	t.Logf("host sysctls as the kubelet sees them: %v", seen)
	if b, err := os.ReadFile(kn.Kubelet.LogPath); err != nil || strings.Contains(string(b), "Updating kernel flag") {
		t.Errorf("kubelet log: %v; it must find no kernel flag to update", err)
	}

	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, kn.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels["e2e.brewlet.sh/kubelet"] != "yes" {
		t.Errorf("node labels: %v", node.Labels)
	}
	waitDefaultServiceAccount(t, cs)

	t.Run("busybox pod scheduled and run, logs through the API server", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "busybox", Namespace: "default"},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				NodeSelector:  map[string]string{"e2e.brewlet.sh/kubelet": "yes"},
				Containers: []corev1.Container{{Name: "bb", Image: kn.BusyboxImage,
					Command: []string{"sh", "-c", "echo hello-from-kubelet; ls /var/run/secrets/kubernetes.io/serviceaccount; grep memory /proc/self/cgroup"}}},
			},
		}
		logs := runPodToCompletion(t, cs, pod)
		t.Logf("busybox pod log:\n%s", logs)
		for _, want := range []string{"hello-from-kubelet", "token", "ca.crt", ":memory:/" + kn.CgroupParent + "/kubepods/"} {
			if !strings.Contains(logs, want) {
				t.Errorf("pod log lacks %q:\n%s", want, logs)
			}
		}
	})

	t.Run("brewlet pod runs the app on the node's CPython runtime", func(t *testing.T) {
		host := hoststate.Under(kn.HostPrefix)
		refs := kit.BuildRuntimes(t, kn.Registry, "python")
		inst := &install.Installer{Layout: host, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}
		if _, err := inst.Install(ctx, install.Request{ID: kit.PyID, Epoch: "7d2e4c1a-5b3f-4e6d-8a9b-0c1d2e3f4a5b", Generation: 1,
			Image: refs["python1"], UID: 10001, GID: 10001}); err != nil {
			t.Fatalf("install runtime: %v", err)
		}
		if err := host.OpenFence(); err != nil {
			t.Fatal(err)
		}
		cur, err := host.Current(kit.PyID)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if err := host.WriteAuthorization(hoststate.Authorization{ID: kit.PyID, Epoch: cur.Epoch, Generation: cur.Generation,
			ConfirmedAt: now, ExpiresAt: now.Add(10 * time.Minute), Node: kn.NodeName}); err != nil {
			t.Fatal(err)
		}
		app := kit.PushHello(t, kit.BuildCLI(t), kn.Registry, "--requires-runtime", kit.PyID)
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: vocab.RuntimeClassName}, Handler: vocab.RuntimeClassName}
		if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		uid, no := int64(10001), false
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default",
				Annotations: map[string]string{vocab.AnnotationRuntimeImage: kit.PyID}},
			Spec: corev1.PodSpec{
				RestartPolicy:                corev1.RestartPolicyNever,
				RuntimeClassName:             &rc.Name,
				AutomountServiceAccountToken: &no,
				Containers: []corev1.Container{{Name: "app", Image: app,
					SecurityContext: &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &uid}}},
			},
		}
		logs := runPodToCompletion(t, cs, pod)
		t.Logf("brewlet pod log (image holds only /app; interpreter from runtime %s):\n%s", kit.PyID, logs)
		for _, want := range []string{"exe /usr/bin/python", "uid 10001 gid 10001", "path /usr/local/bin:/usr/bin:/bin",
			"release BREWLET_RUNTIME_GENERATION=1", "appfiles ['src']"} {
			if !strings.Contains(logs, want) {
				t.Errorf("app output lacks %q:\n%s", want, logs)
			}
		}
	})
}

func expectSysctls(t *testing.T, before map[string]string, when string) {
	t.Helper()
	now, err := framework.HostSysctls()
	if err != nil {
		t.Error(err)
		return
	}
	for k, v := range before {
		if now[k] != v {
			t.Errorf("host sysctl %s changed %s: %s -> %s", strings.ReplaceAll(k, "/", "."), when, v, now[k])
		}
	}
	t.Logf("host sysctls %s: %v", when, now)
}

// waitDefaultServiceAccount waits for kube-controller-manager to create the default
// namespace's service account (pods are refused until it exists).
func waitDefaultServiceAccount(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(context.Background(), "default", metav1.GetOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("default service account: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runPodToCompletion creates a pod, waits until the scheduler bound it and the kubelet ran
// it to success, and returns its log as the API server serves it (from the kubelet).
func runPodToCompletion(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) string {
	t.Helper()
	ctx := context.Background()
	pods := cs.CoreV1().Pods(pod.Namespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	deadline := time.Now().Add(180 * time.Second)
	for {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			if p.Spec.NodeName == "" {
				t.Fatalf("pod %s succeeded without a node", pod.Name)
			}
			b, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				t.Fatalf("logs of pod %s through the API server: %v", pod.Name, err)
			}
			return string(b)
		case corev1.PodFailed:
			b, _ := pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			t.Fatalf("pod %s failed: %s\nlog: %s\n%s", pod.Name, podStatus(p), b, podEvents(t, cs, p))
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s still %s after 180s: %s\n%s", pod.Name, p.Status.Phase, podStatus(p), podEvents(t, cs, p))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func podStatus(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node=%q phase=%s reason=%s message=%s", p.Spec.NodeName, p.Status.Phase, p.Status.Reason, p.Status.Message)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "\n  condition %s=%s %s %s", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, c := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, "\n  container %s: %+v", c.Name, c.State)
	}
	return b.String()
}

func podEvents(t *testing.T, cs kubernetes.Interface, p *corev1.Pod) string {
	t.Helper()
	evs, err := cs.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "event %s %s: %s\n", e.Type, e.Reason, e.Message)
	}
	return b.String()
}

const kubeletHelperEnv = "BREWLET_E2E_HELPER_KUBELET_HANG"

// A test binary killed with SIGKILL while its kubelet runs a pod (with a tmpfs volume
// mounted by the kubelet in its own mount namespace) leaves nothing after the next sweep:
// no kubelet, shim or container, no mount, cgroup, bridge or directory.
func TestKubeletSweptAfterKill(t *testing.T) {
	framework.RequireRoot(t)
	framework.Tool(t, "kubelet")
	f, kill := kit.StartHelper(t, "TestKubeletHelperThenHang", kubeletHelperEnv, 4)
	dir, cpDir, bridge, cgroup := f[0], f[1], f[2], f[3]
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); !strings.Contains(string(mi), dir+"/kubelet/pods/") {
		t.Errorf("the kubelet's volume mounts are not visible on the host (no mount below %s/kubelet/pods)", dir)
	}
	kill()
	kit.SweepLeavesNothing(t, 60*time.Second, bridge, cgroup, dir, cpDir)
}

// TestKubeletHelperThenHang runs only as the child of the test above.
func TestKubeletHelperThenHang(t *testing.T) {
	if os.Getenv(kubeletHelperEnv) == "" {
		t.Skip("helper process for TestKubeletSweptAfterKill")
	}
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{ControllerManager: true, Scheduler: true, SkipCRDs: true})
	kn := framework.StartKubeletNode(t, cp, framework.KubeletOptions{})
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	waitDefaultServiceAccount(t, cs)
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: kn.BusyboxImage, Command: []string{"sleep", "3600"}}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "orphan", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod not running: %s", podStatus(p))
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Printf("HELPER-READY %s %s %s %s\n", kn.Dir, cp.Dir, kn.Bridge, kn.CgroupParent)
	time.Sleep(10 * time.Minute)
}
