package kubelet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/cluster"
	"brewlet.sh/brewlet/test/firsthour"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// logWriter sends progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// The README's main job, as a test on a real cluster with a real kubelet: the chart installed
// with helm runs the operator and the node agent as pods with their own tokens; a web app
// holding only /app, deployed without a securityContext, answers through its Service on
// generation 1 of the CPython runtime and, after a one-digest rotation and a restart, on
// generation 2. Then: the agent's token is node-scoped by the policy; probes, hooks and
// `kubectl exec` run as the runtime's user without capabilities; root is refused at
// admission; an agent that is down leaves running pods alone while new ones wait on
// the startup fence until it is back; and helm uninstall leaves the node as before.
func TestFirstHourOnKubelet(t *testing.T) {
	// containerd as a stock node has it: the chart's agent registers the handler.
	c := cluster.StartWith(t, cluster.Options{AgentRegistersHandler: true})
	ctx := context.Background()
	f := firsthour.New(t, c, logWriter{t})
	before := snapshotNode(t, c, f.Clients.CL)
	f.Run(ctx)

	t.Run("the operations page's commands work as written", func(t *testing.T) {
		firstHourOperationsPage(t, f)
	})
	t.Run("node agent runs with its own token, scoped to its node", func(t *testing.T) {
		firstHourAgentToken(t, f)
	})
	t.Run("exec probe, postStart hook and kubectl exec run as the runtime user without capabilities", func(t *testing.T) {
		firstHourUserProcesses(t, f)
	})
	t.Run("a pod with hostUsers: false answers through its Service, in a user namespace of its own", func(t *testing.T) {
		firstHourUserNamespaces(t, f)
	})
	t.Run("a pod asking for root is refused at admission", func(t *testing.T) {
		pod := firstHourPod("root", f.AppImage)
		root := int64(0)
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &root}
		err := f.Clients.CL.Create(ctx, pod)
		if err == nil || !strings.Contains(err.Error(), string(vocab.ReasonRootNotSupported)) {
			t.Fatalf("pod with runAsUser 0: %v; want a refusal with %s", err, vocab.ReasonRootNotSupported)
		}
		t.Logf("refused: %v", err)
	})
	t.Run("agent down: running pods untouched, new pods wait on the fence until it is back", func(t *testing.T) {
		firstHourAgentDown(t, f)
	})
	t.Run("another rotation: the opted-in app moves, a Deployment that did not opt in stays and is listed", func(t *testing.T) {
		firstHourSecondRotation(t, f)
	})
	t.Run("a digest that keeps the runtime's promise but breaks the app rolls back without moving a byte", func(t *testing.T) {
		firstHourBrokenApp(t, f)
	})
	t.Run("a rotation that breaks the runtime's promise is refused before the node moves, until accepted", func(t *testing.T) {
		firstHourBrokenPromise(t, f)
	})
	t.Run("helm uninstall cleans the node up: as before the install", func(t *testing.T) {
		firstHourUninstall(t, f, before)
	})
}

// A Deployment that did not opt in runs beside the app; the runtime rotates again (back to
// the first digest: a new generation). The app is restarted onto it and `kubectl rollout
// status` succeeds; the other keeps its pods, which taskObservations lists as current (the
// node's agent renews its Lease).
func firstHourSecondRotation(t *testing.T, f *firsthour.Flow) {
	ctx := context.Background()
	manual := f.AppDeployment()
	manual.Name, manual.Annotations = "manual", nil
	manual.Spec.Replicas = ptr.To[int32](1)
	manual.Spec.Selector.MatchLabels = map[string]string{"app": "manual"}
	manual.Spec.Template.Labels = map[string]string{"app": "manual"}
	if err := f.Clients.CL.Create(ctx, manual); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitDeployment(ctx, "manual"); err != nil {
		t.Fatal(err)
	}
	ri := &brewletv1.RuntimeImage{}
	if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, ri); err != nil {
		t.Fatal(err)
	}
	from := ri.Status.Generation
	ri.Spec.Source.Image = f.Runtimes["python1"]
	if err := f.Clients.CL.Update(ctx, ri); err != nil {
		t.Fatal(err)
	}
	_, digest, _ := strings.Cut(f.Runtimes["python1"], "@")
	if err := f.WaitRotated(ctx, digest); err != nil {
		t.Fatal(err)
	}
	kit.Eventually(t, 3*time.Minute, "the app restarted onto the new generation, the other listed", func() (bool, string) {
		got := &brewletv1.RuntimeImage{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, got); err != nil {
			return false, err.Error()
		}
		manualListed, appListed := false, false
		for _, o := range got.Status.TaskObservations {
			for _, b := range o.Bindings {
				if strings.HasPrefix(b.PodName, "manual-") && o.Current && b.Generation == from {
					manualListed = true
				}
				if strings.HasPrefix(b.PodName, firsthour.App+"-") {
					appListed = true
				}
			}
		}
		done := false
		if got.Status.Rotation != nil {
			for _, r := range got.Status.Rotation.Restarts {
				done = done || (r.Name == firsthour.App && r.Outcome == "Succeeded")
			}
		}
		return done && manualListed && !appListed, fmt.Sprintf("generation %d, restarts %+v, observations %+v", got.Status.Generation, got.Status.Rotation, got.Status.TaskObservations)
	})
	if out, err := f.Kubectl(ctx, "-n", firsthour.AppNamespace, "rollout", "status", "deployment/"+firsthour.App, "--timeout=2m"); err != nil {
		t.Fatalf("kubectl rollout status: %v\n%s", err, out)
	}
	d := &appsv1.Deployment{}
	if err := f.Clients.CL.Get(ctx, client.ObjectKey{Namespace: firsthour.AppNamespace, Name: "manual"}, d); err != nil {
		t.Fatal(err)
	}
	if b := d.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration]; b != "" {
		t.Errorf("a Deployment that did not opt in was restarted: barrier %s", b)
	}
}

// firstHourPod is a Brewlet pod of the app image as a developer writes it.
func firstHourPod(name, image string) *corev1.Pod {
	no := false
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: firsthour.AppNamespace,
		Annotations: map[string]string{vocab.AnnotationRuntimeImage: firsthour.RuntimeID}},
		Spec: corev1.PodSpec{RuntimeClassName: ptr.To(vocab.RuntimeClassName), AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "web", Image: image}}}}
}

// waitPod waits until the pod satisfies ok; the failure shows its status and events.
func waitPod(t *testing.T, f *firsthour.Flow, name string, timeout time.Duration, what string, ok func(*corev1.Pod) bool) {
	t.Helper()
	kit.Eventually(t, timeout, "pod "+name+" "+what, func() (bool, string) {
		p := &corev1.Pod{}
		if err := f.Clients.CL.Get(context.Background(), client.ObjectKey{Namespace: firsthour.AppNamespace, Name: name}, p); err != nil {
			return false, err.Error()
		}
		return ok(p), podStatus(p) + "\n" + podEvents(t, f.Clients.CS, p)
	})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// The agent pod authenticates with its own service account; a token bound to that pod (the
// kind the kubelet mounts, carrying the node claim) may write its node's NodeRuntime and is
// refused another node's by the node-scope policy the chart installed.
func firstHourAgentToken(t *testing.T, f *firsthour.Flow) {
	ctx := context.Background()
	pods := &corev1.PodList{}
	if err := f.Clients.CL.List(ctx, pods, client.InNamespace(firsthour.Namespace), client.MatchingLabels{"app.kubernetes.io/component": "provisioner"}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("want one agent pod, have %d", len(pods.Items))
	}
	agentPod := pods.Items[0]
	if agentPod.Spec.ServiceAccountName != "brewlet-provisioner" || agentPod.Spec.NodeName != f.C.NodeName {
		t.Fatalf("agent pod runs as %q on %q", agentPod.Spec.ServiceAccountName, agentPod.Spec.NodeName)
	}
	nrt := &brewletv1.NodeRuntime{}
	if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: f.C.NodeName}, nrt); err != nil {
		t.Fatal(err)
	}
	var writer string
	for _, m := range nrt.ManagedFields {
		if m.Subresource == "status" {
			writer = m.Manager
		}
	}
	if writer != "brewlet-provisioner" {
		t.Errorf("NodeRuntime status written by %q, want the agent (brewlet-provisioner)", writer)
	}
	if !nrt.Status.Complete {
		t.Errorf("NodeRuntime complete=false: the agent pod did not reconcile its leases with containerd's tasks")
	}
	// containerd came without the handler: the agent pod registered it (the machine's
	// containerd parsed the candidate, chrooted into the node's root) and restarted
	// containerd with the node's shell, and the app runs on it.
	cdConfig, err := os.ReadFile(f.C.ContainerdConfig)
	if err != nil {
		t.Fatal(err)
	}
	if cl := nrt.Status.Cleanup; cl == nil || !cl.ContainerdHandlerRegistered || f.C.Node.Restarts() < 1 ||
		!strings.Contains(string(cdConfig), "runtimes."+vocab.RuntimeClassName+"]") {
		t.Errorf("host changes %+v after %d containerd restarts; containerd's config:\n%s", cl, f.C.Node.Restarts(), cdConfig)
	}
	// Its watches (wake-ups) work under the chart's RBAC: no failure logged.
	logs, err := f.Clients.CS.CoreV1().Pods(agentPod.Namespace).GetLogs(agentPod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || strings.Contains(string(logs), "watch for changes:") {
		t.Errorf("agent log (%v):\n%s", err, logs)
	}
	if nrt.Status.AgentPodUID != agentPod.UID {
		t.Errorf("NodeRuntime agentPodUID %q, want the agent pod's %q", nrt.Status.AgentPodUID, agentPod.UID)
	}
	cfg, err := f.C.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other-node"}}
	if err := f.Clients.CL.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	otherNRT := &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: other.Name}}
	if err := f.Clients.CL.Create(ctx, otherNRT); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Clients.CL.Delete(ctx, otherNRT)
		_ = f.Clients.CL.Delete(ctx, other)
	})
	agent := kit.SAClient(t, cfg, firsthour.Namespace, agentPod.Spec.ServiceAccountName, &agentPod)
	if err := kit.WriteStatus(ctx, agent, f.C.NodeName); err != nil {
		t.Errorf("the agent's token cannot write its own node's NodeRuntime: %v", err)
	}
	kit.WaitNodeScopeDenies(t, agent, other.Name)
}

// statusLine finds "<key>:\t..." in /proc/<pid>/status text.
func statusLine(t *testing.T, status, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + key + `:\s*(.*)$`).FindStringSubmatch(status)
	if m == nil {
		t.Fatalf("no %s in /proc/self/status:\n%s", key, status)
	}
	return strings.Join(strings.Fields(m[1]), " ")
}

func expectRuntimeUser(t *testing.T, where, status string) {
	t.Helper()
	uid := fmt.Sprint(firsthour.RuntimeUID)
	if got := statusLine(t, status, "Uid"); got != strings.Repeat(uid+" ", 3)+uid {
		t.Errorf("%s: Uid %s, want %s everywhere", where, got, uid)
	}
	if got := statusLine(t, status, "Gid"); got != strings.Repeat(uid+" ", 3)+uid {
		t.Errorf("%s: Gid %s, want %s everywhere", where, got, uid)
	}
	for _, k := range []string{"CapEff", "CapPrm", "CapAmb"} {
		if got := statusLine(t, status, k); got != "0000000000000000" {
			t.Errorf("%s: %s %s, want none", where, k, got)
		}
	}
}

func firstHourUserProcesses(t *testing.T, f *firsthour.Flow) {
	ctx := context.Background()
	save := func(file string) []string {
		return []string{"python", "-c", "open('" + file + "','w').write(open('/proc/self/status').read())"}
	}
	pod := firstHourPod("processes", f.AppImage)
	ctr := &pod.Spec.Containers[0]
	ctr.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: save("/tmp/poststart")}}}
	ctr.ReadinessProbe = &corev1.Probe{PeriodSeconds: 2, ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: save("/tmp/probe")}}}
	if err := f.Clients.CL.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitPod(t, f, pod.Name, 3*time.Minute, "ready", podReady)

	// A user allowed exactly to exec into the app's pods, through kubectl.
	user := firstHourExecUser(t, f)
	for _, file := range []string{"/tmp/poststart", "/tmp/probe", "/proc/self/status"} {
		cmd := exec.Command(framework.Tool(t, "kubectl"), append(user, "-n", firsthour.AppNamespace,
			"exec", pod.Name, "--", "python", "-c", "print(open('"+file+"').read())")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl exec as a user, reading %s: %v\n%s", file, err, out)
		}
		expectRuntimeUser(t, map[string]string{"/tmp/poststart": "postStart hook", "/tmp/probe": "exec probe",
			"/proc/self/status": "kubectl exec"}[file], string(out))
	}
	// The same user may not read the cluster's secrets: the exec above was not admin's.
	out, err := exec.Command(framework.Tool(t, "kubectl"), append(user, "auth", "can-i", "list", "secrets", "-A")...).CombinedOutput()
	if strings.TrimSpace(string(out)) != "no" {
		t.Errorf("the exec user can list secrets: %s %v", out, err)
	}
}

// firstHourExecUser returns kubectl flags for a service account that may only get pods and
// exec into them in the app's namespace.
func firstHourExecUser(t *testing.T, f *firsthour.Flow) []string {
	t.Helper()
	ctx := context.Background()
	ns, name := firsthour.AppNamespace, "developer"
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}},
	}
	for _, o := range objs {
		if err := f.Clients.CL.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := f.Clients.CS.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.C.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	// The token goes in a kubeconfig file, not on a command line other users can read.
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	kc.CurrentContext = "local"
	path := filepath.Join(f.C.WorkDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return []string{"--kubeconfig", path}
}

// The agent is taken off the node (its DaemonSet's pods leave) after having closed the
// fence, as an agent does at start: the app keeps serving, a new Brewlet pod does not start
// and says why; when the agent is back it re-validates, opens the fence, and the pod runs.
func firstHourAgentDown(t *testing.T, f *firsthour.Flow) {
	ctx := context.Background()
	ds := &appsv1.DaemonSet{}
	key := client.ObjectKey{Namespace: firsthour.Namespace, Name: "brewlet-provisioner"}
	if err := f.Clients.CL.Get(ctx, key, ds); err != nil {
		t.Fatal(err)
	}
	before := ds.DeepCopy()
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"e2e.brewlet.sh/agent-away": "yes"}
	if err := f.Clients.CL.Patch(ctx, ds, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		cur := &appsv1.DaemonSet{}
		if err := f.Clients.CL.Get(ctx, key, cur); err != nil {
			t.Error(err)
			return
		}
		p := client.MergeFrom(cur.DeepCopy())
		cur.Spec.Template.Spec.NodeSelector = before.Spec.Template.Spec.NodeSelector
		if err := f.Clients.CL.Patch(ctx, cur, p); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(restore)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods := &corev1.PodList{}
		if err := f.Clients.CL.List(ctx, pods, client.InNamespace(firsthour.Namespace), client.MatchingLabels{"app.kubernetes.io/component": "provisioner"}); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent pods still there: %d", len(pods.Items))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := hoststate.Under(f.C.HostPrefix).CloseFence(); err != nil {
		t.Fatal(err)
	}
	pod := firstHourPod("while-agent-away", f.AppImage)
	if err := f.Clients.CL.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitPod(t, f, pod.Name, 2*time.Minute, "held at the fence", func(p *corev1.Pod) bool {
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil && strings.Contains(w.Message, string(vocab.ReasonNodeNotReady)) {
				t.Logf("new pod waits: %s: %s", w.Reason, w.Message)
				return true
			}
		}
		return false
	})
	// The refusal reaches the pod's events too, with the shim's typed reason: what
	// `kubectl describe pod` shows a developer.
	kit.Eventually(t, time.Minute, "an event on the pod with reason "+string(vocab.ReasonNodeNotReady), func() (bool, string) {
		evs := podEvents(t, f.Clients.CS, pod)
		return strings.Contains(evs, string(vocab.ReasonNodeNotReady)), evs
	})
	// Brewlet's own status says which node lacks its agent, and why (the operator reads the
	// DaemonSet's pods once the node's heartbeat is stale).
	kit.Eventually(t, 3*time.Minute, "NodeProfile "+firsthour.Profile+" naming the node without an agent", func() (bool, string) {
		np := &brewletv1.NodeProfile{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.Profile}, np); err != nil {
			return false, err.Error()
		}
		for _, pr := range np.Status.NodesWithoutAgent {
			if pr.NodeName == f.C.NodeName && pr.Reason == string(vocab.ReasonAgentPodMissing) {
				t.Logf("NodeProfile status: %s %s: %s", pr.NodeName, pr.Reason, pr.Message)
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", np.Status.NodesWithoutAgent)
	})
	if body, err := f.Ask(ctx, "/", "hello from"); err != nil {
		t.Errorf("the app stopped answering while the agent was away: %v", err)
	} else {
		t.Logf("the app still answers:\n%s", body)
	}
	restore()
	waitPod(t, f, pod.Name, 3*time.Minute, "running after the agent came back", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	kit.Eventually(t, 2*time.Minute, "the node leaving status.nodesWithoutAgent", func() (bool, string) {
		np := &brewletv1.NodeProfile{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.Profile}, np); err != nil {
			return false, err.Error()
		}
		return np.Status.NodesWithoutAgentCount == 0, fmt.Sprintf("%+v", np.Status.NodesWithoutAgent)
	})
}

// operationsJQ is the operations page's query for containers still on an older generation,
// as printed there.
const operationsJQ = `
  .status.taskObservations[]
  | "\(.nodeName)\tcurrent=\(.current)\t\(.observedAt)" as $node
  | .bindings[]?
  | [$node, .podNamespace, .podName, .containerName, (.generation|tostring)]
  | @tsv`

// The commands the operations page gives, run as written (with the cluster's kubeconfig)
// after the main job: every container runs the current generation, the common case in which
// the page's jq program once failed on a missing taskObservations.
func firstHourOperationsPage(t *testing.T, f *firsthour.Flow) {
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(framework.Tool(t, "kubectl"), append([]string{"--kubeconfig", f.C.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	for _, want := range []struct {
		args []string
		has  string
	}{
		{[]string{"get", "runtimeimages.node.brewlet.sh"}, firsthour.RuntimeID},
		{[]string{"get", "nodeprofiles.node.brewlet.sh"}, firsthour.Profile},
		{[]string{"get", "nodes", "-L", "brewlet.sh/runtime"}, "ready"},
		{[]string{"get", "runtimeimage", firsthour.RuntimeID, "-o", `jsonpath={.status.conditions[?(@.type=="OldGenerationTasks")].message}{"\n"}`}, "every reported container"},
	} {
		if out := kubectl(want.args...); !strings.Contains(out, want.has) {
			t.Errorf("kubectl %v: lacks %q:\n%s", want.args, want.has, out)
		}
	}
	js := kubectl("get", "runtimeimage", firsthour.RuntimeID, "-o", "json")
	jq := exec.Command("jq", "-r", operationsJQ)
	jq.Stdin = strings.NewReader(js)
	out, err := jq.CombinedOutput()
	if err != nil {
		t.Fatalf("the operations page's jq program: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("containers on an older generation after the restart:\n%s", out)
	}
}
