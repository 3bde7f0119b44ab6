package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/restarts"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// restartWorld is a control plane with kube-controller-manager, the scheduler and kwok
// nodes, the operator as its own process with rotation restarts on, and a stand-in for the
// node agents: the test writes each fake node's report (its runtime entry, the tasks of the
// pods kwok runs there) and renews its Lease, as agents do.
type restartWorld struct {
	cp    *framework.ControlPlane
	op    *kit.RunningOperator
	start func() *kit.RunningOperator
	nodes []string
	id    string
	// generation the stand-in agents report for a pod: pods made from a template that
	// carries the barrier run the target, the others the generation they started on.
	podGen func(p *corev1.Pod) int64
	// dead are the nodes whose stand-in agent stopped: no report, no heartbeat.
	dead map[string]bool
	// failedStarts are what each node's report lists as containers that failed to start.
	failedStarts map[string][]brewletv1.NodeFailedStart
}

const restartNS = "apps-under-test"

func startRestartWorld(t *testing.T, maxConcurrent int, deadline time.Duration, flags ...string) *restartWorld {
	t.Helper()
	return startRestartWorldWith(t, maxConcurrent, deadline, nil, flags...)
}

// startRestartWorldWith is startRestartWorld with more chart values for the operator's RBAC.
func startRestartWorldWith(t *testing.T, maxConcurrent int, deadline time.Duration, chartArgs []string, flags ...string) *restartWorld {
	t.Helper()
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{ControllerManager: true, Scheduler: true, Kwok: true, KwokNodes: 2})
	w := &restartWorld{cp: cp, nodes: []string{"kwok-node-0", "kwok-node-1"}, id: "python"}
	kit.Must(t, cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restartNS}}))
	kit.Must(t, cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kit.ChartNS}}))
	// Agents hold their node's Lease before they ever report (it fences their writes).
	for _, n := range w.nodes {
		w.heartbeat(t, n)
	}
	w.start = func() *kit.RunningOperator {
		return kit.StartOperatorFlags(t, cp, append([]string{"--set", "operator.rotationRestarts.enabled=true"}, chartArgs...), append([]string{"--rotation-restarts",
			fmt.Sprintf("--rotation-restart-max-concurrent=%d", maxConcurrent), "--rotation-restart-progress-deadline=" + deadline.String()}, flags...)...)
	}
	w.op = w.start()
	return w
}

// approve creates RuntimeImage python at digest 1, waits for its generation 1 and returns
// its epoch; pods made from a template that carries the barrier then run its generation,
// the others generation 1.
func (w *restartWorld) approve(t *testing.T) string {
	t.Helper()
	c := w.cp.Client
	kit.Must(t, c.Create(context.Background(), kit.RuntimeImage("python", "127.0.0.1:5000/runtimes/python@"+kit.DigestN(1))))
	kit.Eventually(t, 30*time.Second, "generation 1", func() (bool, string) {
		got := getRI(t, c, "python")
		return got.Status.Generation == 1, fmt.Sprintf("%+v", got.Status)
	})
	w.podGen = func(p *corev1.Pod) int64 {
		if b, ok := restarts.ParseBarrier(p.Annotations[vocab.AnnotationRotatedToGeneration]); ok {
			return b.Generation // made from a restarted template: started on the target
		}
		return 1
	}
	return string(getRI(t, c, "python").UID)
}

// rotate sets RuntimeImage python to digest n and waits for generation gen.
func (w *restartWorld) rotate(t *testing.T, n int, gen int64) {
	t.Helper()
	c := w.cp.Client
	cur := getRI(t, c, "python")
	base := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Source.Image = "127.0.0.1:5000/runtimes/python@" + kit.DigestN(n)
	kit.Must(t, c.Patch(context.Background(), cur, base))
	kit.Eventually(t, 30*time.Second, fmt.Sprintf("generation %d", gen), func() (bool, string) {
		got := getRI(t, c, "python")
		return got.Status.Generation == gen, fmt.Sprintf("%+v", got.Status)
	})
}

// pinned creates one opted-in Deployment per name, its pods bound to the node given.
func (w *restartWorld) pinned(t *testing.T, byName map[string]string) {
	t.Helper()
	for name, node := range byName {
		d := restartDeployment(name, true)
		d.Spec.Template.Spec.NodeName = node
		kit.Must(t, w.cp.Client.Create(context.Background(), d))
	}
}

// follow reports through report until the restart outcomes read want.
func (w *restartWorld) follow(t *testing.T, report func(), want string) {
	t.Helper()
	last := ""
	kit.Eventually(t, 3*time.Minute, want, func() (bool, string) {
		report()
		o := restartOutcomes(getRI(t, w.cp.Client, "python"))
		if o != last {
			t.Logf("restarts: %s", o)
			last = o
		}
		return o == want, o
	})
}

// report writes every fake node's NodeRuntime status: one task per running pod of the
// runtime on that node, and the runtime at gen, first Installing on every node, then Ready
// (as agents install, then serve: the rotation completes only once every node reported its
// pods); and renews the nodes' agent Leases.
func (w *restartWorld) report(t *testing.T, gen int64, epoch string) {
	t.Helper()
	w.reportState(t, gen, epoch, vocab.StateInstalling)
	w.reportState(t, gen, epoch, vocab.StateReady)
}

func (w *restartWorld) reportState(t *testing.T, gen int64, epoch string, state vocab.RuntimeState) {
	t.Helper()
	w.reportEntries(t, func(string) brewletv1.NodeRuntimeEntry {
		return brewletv1.NodeRuntimeEntry{ID: w.id, Epoch: types.UID(epoch), Generation: gen, State: string(state)}
	})
}

// reportEntries writes every fake node's report with the runtime entry entry(node) and the
// tasks of the pods kwok runs there.
func (w *restartWorld) reportEntries(t *testing.T, entry func(node string) brewletv1.NodeRuntimeEntry) {
	t.Helper()
	ctx, c := context.Background(), w.cp.Client
	pods := &corev1.PodList{}
	kit.Must(t, c.List(ctx, pods, client.InNamespace(restartNS)))
	for _, node := range w.nodes {
		if w.dead[node] {
			continue
		}
		nrt := &brewletv1.NodeRuntime{}
		if err := c.Get(ctx, client.ObjectKey{Name: node}, nrt); apierrors.IsNotFound(err) {
			nrt = &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: node}}
			kit.Must(t, c.Create(ctx, nrt))
		} else {
			kit.Must(t, err)
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		e := entry(node)
		st := brewletv1.NodeRuntimeStatus{Complete: true, ObservedAt: &now, Runtimes: []brewletv1.NodeRuntimeEntry{e},
			FailedStarts: w.failedStarts[node]}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.NodeName != node || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			st.Tasks = append(st.Tasks, brewletv1.NodeTask{PodNamespace: p.Namespace, PodName: p.Name, PodUID: p.UID,
				ContainerName: "app", ID: w.id, Epoch: e.Epoch, Generation: w.podGen(p)})
		}
		w.heartbeat(t, node)
		nrt.Status = st
		kit.Must(t, c.Status().Update(ctx, nrt))
	}
}

// waitRunning waits until kwok runs n pods in the test namespace.
func (w *restartWorld) waitRunning(t *testing.T, n int) {
	t.Helper()
	kit.Eventually(t, 2*time.Minute, "every pod running", func() (bool, string) {
		pods := &corev1.PodList{}
		kit.Must(t, w.cp.Client.List(context.Background(), pods, client.InNamespace(restartNS)))
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n, fmt.Sprintf("%d of %d pods running", running, n)
	})
}

func (w *restartWorld) heartbeat(t *testing.T, node string) {
	t.Helper()
	renewAgentLease(t, w.cp.Client, node)
}

// renewAgentLease renews node's agent Lease as a stand-in agent (creating it the first time).
func renewAgentLease(t *testing.T, c client.Client, node string) {
	t.Helper()
	kit.Must(t, renewLease(context.Background(), c, node))
}

func renewLease(ctx context.Context, c client.Client, node string) error {
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: kit.ChartNS, Name: vocab.AgentLeasePrefix + node}
	err := c.Get(ctx, key, l)
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: kit.ChartNS, Name: key.Name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("agent-" + node), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &now}}
		return c.Create(ctx, l)
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	return c.Update(ctx, l)
}

// workload makes an opted-in (or not) Deployment whose pods run the runtime on kwok nodes.
func restartDeployment(name string, optIn bool) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: restartNS},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{vocab.AnnotationRuntimeImage: "python"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app@" + kit.GoodDigest}},
					Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}}}}}}
	if optIn {
		d.Annotations = map[string]string{vocab.AnnotationRestartOnRotation: "true"}
		// Rollouts take seconds, not milliseconds: restarts in progress can be seen.
		d.Spec.MinReadySeconds = 4
	}
	return d
}

// restartOutcomes renders status.rotation.restarts as "Kind/name=Outcome" sorted.
func restartOutcomes(ri *brewletv1.RuntimeImage) string {
	if ri.Status.Rotation == nil {
		return ""
	}
	var out []string
	for _, r := range ri.Status.Rotation.Restarts {
		out = append(out, r.Kind+"/"+r.Name+"="+r.Outcome)
	}
	return strings.Join(out, " ")
}

// After a rotation reaches every node, opted-in workloads whose pods run the older generation
// are restarted through their own strategy (at most maxConcurrent at once), outcome from the
// rollout; a workload that did not opt in keeps its pods and shows in taskObservations;
// OnDelete is NotApplicable, a paused Deployment Deferred; an operator restarted
// mid-rotation patches nothing twice.
func TestRotationRestarts(t *testing.T) {
	w := startRestartWorld(t, 1, 10*time.Minute)
	ctx, c := context.Background(), w.cp.Client
	epoch := w.approve(t)
	paused := restartDeployment("paused", true) // paused once its pods run
	ondelete := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "ondelete", Namespace: restartNS,
		Annotations: map[string]string{vocab.AnnotationRestartOnRotation: "true"}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "ondelete",
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ondelete"}},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Template:       restartDeployment("ondelete", false).Spec.Template}}
	for _, o := range []client.Object{restartDeployment("web-a", true), restartDeployment("web-b", true), restartDeployment("bystander", false), paused, ondelete} {
		kit.Must(t, c.Create(ctx, o))
	}
	w.waitRunning(t, 9)
	pausePatch := client.MergeFrom(paused.DeepCopy())
	paused.Spec.Paused = true
	kit.Must(t, c.Patch(ctx, paused, pausePatch))
	w.report(t, 1, epoch)
	generations := map[string]int64{}
	for _, n := range []string{"web-a", "web-b", "bystander", "paused"} {
		d := &appsv1.Deployment{}
		kit.Must(t, c.Get(ctx, client.ObjectKey{Namespace: restartNS, Name: n}, d))
		generations[n] = d.Generation
	}

	// Generation 1 is on every node and every pod runs it: nothing to restart.
	time.Sleep(3 * time.Second)
	if got := restartOutcomes(getRI(t, c, "python")); got != "" {
		t.Fatalf("restarts before any rotation: %s", got)
	}

	// The rotation: generation 2 reaches both nodes; every pod still runs generation 1.
	w.rotate(t, 2, 2)
	maxInProgress := 0
	restarted := false
	last := ""
	deadline := time.Now().Add(3 * time.Minute)
	for {
		w.report(t, 2, epoch) // the stand-in agents report what kwok runs now
		got := getRI(t, c, "python")
		outcomes := restartOutcomes(got)
		if outcomes != last {
			t.Logf("restarts: %s", outcomes)
			last = outcomes
		}
		if n := strings.Count(outcomes, "="+restarts.OutcomeInProgress); n > maxInProgress {
			maxInProgress = n
		}
		if outcomes == "Deployment/paused=Deferred Deployment/web-a=Succeeded Deployment/web-b=Succeeded StatefulSet/ondelete=NotApplicable" {
			break
		}
		if !restarted && strings.Contains(outcomes, "=InProgress") {
			// Kill the operator mid-rotation: its successor must not patch again.
			restarted = true
			w.op.Stop()
			w.op = w.start()
		}
		if time.Now().After(deadline) {
			out, _ := w.cp.Kubectl(t, "-n", restartNS, "get", "deploy,sts,pods", "-o", "wide")
			ann, _ := w.cp.Kubectl(t, "-n", restartNS, "get", "deploy", "-o", "jsonpath={range .items[*]}{.metadata.name} {.spec.template.metadata.annotations}{\"\\n\"}{end}")
			out += "\n" + ann
			t.Fatalf("restarts did not finish: %q\n%s", outcomes, out)
		}
		time.Sleep(time.Second)
	}
	if maxInProgress != 1 || !restarted {
		t.Errorf("restarts in progress at once: at most %d seen (want 1, the limit); operator restarted mid-rotation: %t", maxInProgress, restarted)
	}
	for n, g := range generations {
		d := &appsv1.Deployment{}
		kit.Must(t, c.Get(ctx, client.ObjectKey{Namespace: restartNS, Name: n}, d))
		want := g
		if n == "web-a" || n == "web-b" {
			want = g + 1 // exactly one patch: the barrier
		}
		if d.Generation != want {
			t.Errorf("deployment %s generation %d -> %d, want %d", n, g, d.Generation, want)
		}
		b, ok := restarts.ParseBarrier(d.Spec.Template.Annotations[vocab.AnnotationRotatedToGeneration])
		if (want > g) != ok || (ok && (b.Generation != 2 || string(b.Epoch) != epoch)) {
			t.Errorf("deployment %s barrier %+v", n, b)
		}
	}
	// The bystander kept its pods on generation 1: they show in taskObservations.
	kit.Eventually(t, time.Minute, "bystander in taskObservations", func() (bool, string) {
		// Reported again each time: the last report of the loop above may predate the
		// deletion of a restarted workload's old pod.
		w.reportState(t, 2, epoch, vocab.StateReady)
		got := getRI(t, c, "python")
		for _, o := range got.Status.TaskObservations {
			for _, b := range o.Bindings {
				if !strings.HasPrefix(b.PodName, "bystander-") && !strings.HasPrefix(b.PodName, "paused-") && !strings.HasPrefix(b.PodName, "ondelete-") {
					return false, "a restarted workload's pod is still listed: " + b.PodName
				}
			}
		}
		return len(got.Status.TaskObservations) > 0, fmt.Sprintf("%+v", got.Status.TaskObservations)
	})
	kit.Eventually(t, 30*time.Second, "restart metrics", func() (bool, string) {
		body, err := kit.ScrapeMetrics(t, w.cp, w.op.Metrics)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(body, `brewlet_operator_rotation_restarts{id="python",outcome="Succeeded"} 2`) &&
			strings.Contains(body, `brewlet_operator_rotation_restarts{id="python",outcome="Deferred"} 1`), "gauges not yet at the outcomes"
	})
	// `brewlet status` answers "where is my rotation" from the same status.
	cli := kit.BuildCLI(t)
	out, errOut, code := kit.Brewlet(t, cli, "status", "python", "--kubeconfig", w.cp.Kubeconfig, "-o", "json")
	var sts []struct {
		Generation    int64
		Workloads     map[string]int
		OldContainers []struct{ Pod string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &sts) != nil || len(sts) != 1 {
		t.Fatalf("brewlet status -o json: exit %d: %s%s", code, out, errOut)
	}
	if s := sts[0]; s.Generation != 2 || s.Workloads["Succeeded"] != 2 || s.Workloads["Deferred"] != 1 || s.Workloads["NotApplicable"] != 1 || len(s.OldContainers) == 0 {
		t.Errorf("brewlet status: %+v", s)
	}
	if table, _, _ := kit.Brewlet(t, cli, "status", "--kubeconfig", w.cp.Kubeconfig); !strings.Contains(table, "2 Succeeded · 1 Deferred · 1 NotApplicable") || !strings.Contains(table, "bystander-") {
		t.Errorf("brewlet status table:\n%s", table)
	}
	// The same binary installed as the kubectl plugin: kubectl finds kubectl-brewlet on PATH.
	plugins := t.TempDir()
	if err := os.Symlink(cli, filepath.Join(plugins, "kubectl-brewlet")); err != nil {
		t.Fatal(err)
	}
	// A kubeconfig whose current context is another cluster: --context picks this one.
	kc, err := clientcmd.LoadFromFile(w.cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	here := kc.CurrentContext
	kc.Clusters["elsewhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.Contexts["elsewhere"] = &clientcmdapi.Context{Cluster: "elsewhere", AuthInfo: kc.Contexts[here].AuthInfo}
	kc.CurrentContext = "elsewhere"
	twoContexts := filepath.Join(plugins, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, twoContexts); err != nil {
		t.Fatal(err)
	}
	plugin := exec.Command(framework.Tool(t, "kubectl"), "brewlet", "status", "python", "--kubeconfig", twoContexts, "--context", here)
	plugin.Env = append(os.Environ(), "PATH="+plugins+":"+os.Getenv("PATH"))
	if got, err := plugin.CombinedOutput(); err != nil || !strings.Contains(string(got), "2 Succeeded · 1 Deferred · 1 NotApplicable") {
		t.Errorf("kubectl brewlet status python --context %s: %v\n%s", here, err, got)
	}
	// Control: without --context the plugin asks the other cluster, and says so.
	elsewhere := exec.Command(framework.Tool(t, "kubectl"), "brewlet", "status", "python", "--kubeconfig", twoContexts)
	elsewhere.Env = plugin.Env
	if got, err := elsewhere.CombinedOutput(); err == nil {
		t.Errorf("kubectl brewlet status against the current context (a cluster that is not there) succeeded:\n%s", got)
	}
	evs, _ := w.cp.Kubectl(t, "-n", restartNS, "get", "events", "--field-selector", "reason=RotationRestart", "-o", "name")
	if strings.Count(evs, "\n") < 2 {
		t.Errorf("RotationRestart events on the workloads: %q", evs)
	}
}
