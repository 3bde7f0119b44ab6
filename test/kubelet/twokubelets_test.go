package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/cluster"
	"brewlet.sh/brewlet/test/firsthour"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// Two real kubelet nodes, each with its own containerd, registry, bridge, cgroup parent,
// host state and agent pod (the chart's DaemonSet, one hostPrefix for both: each node sees
// its own state there). The runtime rotates in waves of one node; the agent of the node in
// the second wave hangs mid-rotation (its process is stopped, its pod stays Running). The
// rotation completes without that node (AgentNotReporting), the app spread over both nodes
// is restarted onto generation 2 with its new pods kept off the stuck node, and the node
// rejoins once its agent runs again. Each agent's token writes only its own node.
// Prometheus, set up from the chart's ServiceMonitors and PrometheusRule (alerts_test.go),
// scrapes both agents and the operator throughout: the healthy cluster raises no alert, the
// stuck node raises the stuck-node and expiring-authorization alerts, and they clear when
// it rejoins.
func TestRotationAcrossTwoKubeletNodes(t *testing.T) {
	c := cluster.StartWith(t, cluster.Options{Nodes: 2})
	ctx := context.Background()
	f := firsthour.New(t, c, logWriter{t})
	f.Spread = true
	f.Values = monitoringValues()
	installMonitoringCRDs(t, f)
	names := []string{c.Nodes[0].NodeName, c.Nodes[1].NodeName}

	// Waves of one node: the profile exists before the walk-through approves the runtime.
	one := intstr.FromInt32(1)
	np := &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: firsthour.Profile}, Spec: brewletv1.NodeProfileSpec{
		NodePool:          brewletv1.NodePool{Key: cluster.PoolKey, Names: []string{cluster.PoolName}},
		RuntimeImages:     []brewletv1.OfferedRuntime{{ID: firsthour.RuntimeID}},
		ContainerdRestart: string(vocab.ContainerdRestartNone),
		Rollout:           &brewletv1.RolloutPolicy{MaxUnavailable: &one}}}
	steps := f.Steps()
	if !strings.HasPrefix(steps[3].Name, "Install the Helm chart") || !strings.HasPrefix(steps[6].Name, "Deploy") {
		t.Fatalf("the walk-through's steps moved: %q, %q", steps[3].Name, steps[6].Name)
	}
	f.Progress.Total = 7
	for _, s := range steps[:4] { // images, runtimes, their signatures, the chart
		f.Do(ctx, s)
	}
	kit.Must(t, f.Clients.CL.Create(ctx, np))
	for _, s := range steps[4:7] { // approve, publish, deploy
		f.Do(ctx, s)
	}
	kit.Eventually(t, 3*time.Minute, "both nodes serve generation 1", func() (bool, string) {
		got := &brewletv1.NodeProfile{}
		kit.Must(t, f.Clients.CL.Get(ctx, client.ObjectKeyFromObject(np), got))
		return got.Status.ReadyNodes == 2, fmt.Sprintf("%+v", got.Status)
	})
	if on := appNodes(t, f); !slices.Equal(on, slices.Sorted(slices.Values(names))) {
		t.Fatalf("the app's pods run on %v, want one on each of %v", on, names)
	}
	prom, dashboard := startChartPrometheus(t, f)
	t.Run("Prometheus scrapes every component and a healthy cluster raises no alert", func(t *testing.T) {
		expectTargetsUp(t, prom, map[string]int{"brewlet-operator-metrics": 1, "brewlet-provisioner-metrics": 2})
		// The agents' series say which node they speak for (the ServiceMonitor's relabeling).
		kit.Eventually(t, time.Minute, "each node's current generation, by node", func() (bool, string) {
			vec, err := prom.Query(ctx, `brewlet_runtime_image_generations{id="python",state="current"} == 1`)
			var got []string
			for _, s := range vec {
				got = append(got, string(s.Metric["node"]))
			}
			slices.Sort(got)
			return err == nil && slices.Equal(got, slices.Sorted(slices.Values(names))), fmt.Sprintf("%v %v", vec, err)
		})
		for _, e := range dashboard {
			if _, err := prom.Query(ctx, e); err != nil {
				t.Errorf("dashboard: %v", err)
			}
		}
		expectNoAlerts(t, prom)
	})

	t.Run("each agent's token writes only its own node", func(t *testing.T) {
		for i, pod := range agentPods(t, f, names) {
			self, other := names[i], names[1-i]
			agent := kit.SAClient(t, mustRESTConfig(t, c), firsthour.Namespace, pod.Spec.ServiceAccountName, pod)
			if err := kit.WriteStatus(ctx, agent, self); err != nil {
				t.Errorf("agent of %s cannot write its own NodeRuntime: %v", self, err)
			}
			kit.ExpectDenied(t, kit.WriteStatus(ctx, agent, other), "agents write only their own node")
			lease := &coordinationv1.Lease{}
			kit.Must(t, agent.Get(ctx, client.ObjectKey{Namespace: firsthour.Namespace, Name: "brewlet-provisioner-" + other}, lease))
			thief := "agent-" + self
			lease.Spec.HolderIdentity = &thief
			kit.ExpectDenied(t, agent.Update(ctx, lease), "agents write only their own node")
			kit.ExpectDenied(t, kit.LabelNode(ctx, agent, other, vocab.RuntimeLabel(firsthour.RuntimeID), vocab.LabelValueReady), "agents write only their own node")
		}
	})

	ri := &brewletv1.RuntimeImage{}
	kit.Must(t, f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, ri))
	ri.Spec.Source.Image = f.Runtimes["python2"]
	kit.Must(t, f.Clients.CL.Update(ctx, ri))
	// Wave one: exactly one node is allowed generation 2; the other's agent then hangs.
	var first, stuck string
	kit.Eventually(t, 2*time.Minute, "one node allowed generation 2, the other not", func() (bool, string) {
		allowed := map[string]int64{}
		for _, n := range names {
			nrt := &brewletv1.NodeRuntime{}
			kit.Must(t, f.Clients.CL.Get(ctx, client.ObjectKey{Name: n}, nrt))
			for _, r := range nrt.Spec.Runtimes {
				if r.ID == firsthour.RuntimeID {
					allowed[n] = r.AllowedGeneration
				}
			}
		}
		switch {
		case allowed[names[0]] == 2 && allowed[names[1]] < 2:
			first, stuck = names[0], names[1]
		case allowed[names[1]] == 2 && allowed[names[0]] < 2:
			first, stuck = names[1], names[0]
		}
		return first != "", fmt.Sprintf("allowed generations %v", allowed)
	})
	resume := hangAgent(t, f, c, stuck)
	t.Logf("wave one: %s; the agent of %s hangs", first, stuck)

	kit.Eventually(t, 6*time.Minute, "the rotation completes without the stuck node", func() (bool, string) {
		got := &brewletv1.RuntimeImage{}
		kit.Must(t, f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, got))
		r := got.Status.Rotation
		cond := meta.FindStatusCondition(got.Status.Conditions, string(vocab.ConditionRotationComplete))
		ok := r != nil && r.Target.Generation == 2 && r.RotationCompletedAt != nil && r.Nodes.Current == 1 && r.Nodes.Stuck == 1 &&
			len(r.ExcludedNodes) == 1 && r.ExcludedNodes[0].Name == stuck && r.ExcludedNodes[0].Reason == string(vocab.ReasonAgentNotReporting) &&
			cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == string(vocab.ReasonCompleteWithExclusions)
		return ok, fmt.Sprintf("rotation %+v, condition %+v", r, cond)
	})
	if out, err := f.Kubectl(ctx, "get", "runtimeimage", firsthour.RuntimeID, "-o", "wide"); err == nil {
		t.Log(out)
	}
	t.Run("the stuck node raises its alerts", func(t *testing.T) {
		kit.Eventually(t, time.Minute, "brewlet_operator_rotation_nodes{state=stuck} is 1 in Prometheus", func() (bool, string) {
			v, s := queryValue(t, prom, `max(brewlet_operator_rotation_nodes{id="python",state="stuck"})`)
			return v == 1, s
		})
		firing(t, prom, 3*time.Minute, []string{"BrewletNodeStuck", "id", firsthour.RuntimeID},
			[]string{"BrewletAuthorizationExpiring", "id", firsthour.RuntimeID, "node", stuck})
	})

	// The app had a pod on the stuck node: it is restarted, and its new pods land where
	// generation 2 is served.
	kit.Eventually(t, 5*time.Minute, "the app restarted onto generation 2, off the stuck node", func() (bool, string) {
		got := &brewletv1.RuntimeImage{}
		kit.Must(t, f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, got))
		done := false
		if got.Status.Rotation != nil {
			for _, r := range got.Status.Rotation.Restarts {
				done = done || (r.Name == firsthour.App && r.Outcome == "Succeeded")
			}
		}
		on := appNodes(t, f)
		return done && slices.Equal(on, []string{first, first}), fmt.Sprintf("app pods on %v; restarts %+v", on, got.Status.Rotation)
	})
	if _, err := f.Ask(ctx, "/", "BREWLET_RUNTIME_GENERATION=2"); err != nil {
		t.Fatal(err)
	}
	// Not luck of the scheduler: pod admission kept the restarted pods off the stuck node.
	pods := &corev1.PodList{}
	kit.Must(t, f.Clients.CL.List(ctx, pods, client.InNamespace(firsthour.AppNamespace), client.MatchingLabels{"app": firsthour.App}))
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 1 || !slices.ContainsFunc(terms[0].MatchFields, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == "metadata.name" && r.Operator == corev1.NodeSelectorOpNotIn && slices.Equal(r.Values, []string{stuck})
		}) {
			t.Errorf("restarted pod %s: required terms %+v, want metadata.name NotIn [%s]", p.Name, terms, stuck)
		}
	}

	// The agent runs again: the node installs its allowance and counts as current.
	resume()
	kit.Eventually(t, 4*time.Minute, "the stuck node rejoins", func() (bool, string) {
		got := &brewletv1.RuntimeImage{}
		kit.Must(t, f.Clients.CL.Get(ctx, client.ObjectKey{Name: firsthour.RuntimeID}, got))
		r := got.Status.Rotation
		return r != nil && r.Nodes.Current == 2 && r.Nodes.Stuck == 0 && len(r.ExcludedNodes) == 0, fmt.Sprintf("%+v", r)
	})
	t.Run("the alerts clear once the node rejoins", func(t *testing.T) {
		kit.Eventually(t, 2*time.Minute, "no alert left", func() (bool, string) {
			alerts, err := prom.Alerts(ctx)
			return err == nil && len(alerts) == 0, alertList(alerts)
		})
		if v, s := queryValue(t, prom, `max(brewlet_operator_rotation_nodes{id="python",state="stuck"})`); v != 0 {
			t.Errorf("stuck nodes in Prometheus after the rejoin: %s", s)
		}
		expectNoAlerts(t, prom)
	})
}

// appNodes lists the nodes of the app's running pods, sorted.
func appNodes(t *testing.T, f *firsthour.Flow) []string {
	t.Helper()
	pods := &corev1.PodList{}
	kit.Must(t, f.Clients.CL.List(context.Background(), pods, client.InNamespace(firsthour.AppNamespace), client.MatchingLabels{"app": firsthour.App}))
	var on []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
			on = append(on, p.Spec.NodeName)
		}
	}
	slices.Sort(on)
	return on
}

// agentPods returns the running agent pod of each node, in the order of nodes.
func agentPods(t *testing.T, f *firsthour.Flow, nodes []string) []*corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	kit.Must(t, f.Clients.CL.List(context.Background(), pods, client.InNamespace(firsthour.Namespace), client.MatchingLabels(vocab.AgentPodLabels)))
	out := make([]*corev1.Pod, len(nodes))
	for i := range pods.Items {
		if j := slices.Index(nodes, pods.Items[i].Spec.NodeName); j >= 0 && pods.Items[i].Status.Phase == corev1.PodRunning {
			out[j] = &pods.Items[i]
		}
	}
	for i, p := range out {
		if p == nil {
			t.Fatalf("no running agent pod on %s", nodes[i])
		}
	}
	return out
}

func mustRESTConfig(t *testing.T, c *cluster.Cluster) *rest.Config {
	t.Helper()
	cfg, err := c.RESTConfig()
	kit.Must(t, err)
	return cfg
}

// hangAgent stops the agent process on node (SIGSTOP): its pod stays Running and the
// kubelet sees nothing wrong, but the agent renews nothing, as a hung agent would. The
// returned func (also run at cleanup) lets it go on.
func hangAgent(t *testing.T, f *firsthour.Flow, c *cluster.Cluster, node string) func() {
	t.Helper()
	var kn *framework.KubeletNode
	for _, n := range c.Nodes {
		if n.NodeName == node {
			kn = n
		}
	}
	pod := agentPods(t, f, []string{node})[0]
	if len(pod.Status.ContainerStatuses) != 1 {
		t.Fatalf("agent pod %s has %d container statuses", pod.Name, len(pod.Status.ContainerStatuses))
	}
	_, id, _ := strings.Cut(pod.Status.ContainerStatuses[0].ContainerID, "://")
	st, err := kn.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	kit.Must(t, err)
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid < 2 {
		t.Fatalf("agent container %s on %s: no pid in its status (%v): %s", id, node, err, st.GetInfo()["info"])
	}
	kit.Must(t, syscall.Kill(info.Pid, syscall.SIGSTOP))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(info.Pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	return resume
}
