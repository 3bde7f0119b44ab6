package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

func TestStatusTable(t *testing.T) {
	ri := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "python", UID: "e-1"}}
	ri.Status = brewletv1.RuntimeImageStatus{Epoch: "e-1", Generation: 3, Digest: "sha256:2c368792963f7ae1f84416ba76094786f10fc6e244520fab65cf49ab293bdf91",
		Conditions: []metav1.Condition{
			{Type: string(vocab.ConditionApproved), Status: metav1.ConditionTrue, Reason: "Approved"},
			{Type: string(vocab.ConditionRolledBack), Status: metav1.ConditionTrue, Reason: "RolledBack", Message: "generation 2 (sha256:9) failed restarted workloads"},
			{Type: string(vocab.ConditionRotationProgressing), Status: metav1.ConditionTrue, Reason: "Rotating",
				Message: "3 of 6 node(s) serve generation 3; 2 installing, 1 failed; nodes without a running agent: n7 (AgentContainerFailing) (NodeProfile general)"}},
		Rotation: &brewletv1.RotationStatus{Nodes: brewletv1.RotationNodeCounts{Current: 3, Installing: 2, Failed: 1, Excluded: 1},
			ExcludedNodes: []brewletv1.ExcludedNode{{Name: "n6", Reason: "PrivilegedRuntimeFile", Generation: 3}},
			Restarts: []brewletv1.WorkloadRestart{
				{Kind: "Deployment", Namespace: "shop", Name: "web", Outcome: "Succeeded"},
				{Kind: "Deployment", Namespace: "shop", Name: "batch", Outcome: "Deferred", Message: "the Deployment is paused"}},
			RestartsHalted: &brewletv1.RestartsHalt{Failed: 2, MaxFailures: 1, Message: "2 restarted workload(s) failed"},
			FailedStarts:   &brewletv1.FailedStarts{Nodes: 2, Pods: 2, MaxFailures: 1, Exceeded: true, Message: "2 pod(s) on 2 node(s) had a container exit with an error"}},
		TaskObservations: []brewletv1.TaskObservation{{NodeName: "n2", Current: false, Bindings: []brewletv1.TaskBinding{
			{PodNamespace: "shop", PodName: "batch-1", ContainerName: "app", Epoch: "e-1", Generation: 2},
			{PodNamespace: "ops", PodName: "old", ContainerName: "app", Epoch: "e-0", Generation: 9}}}},
		OmittedNodes: 4}
	s := StatusOf(ri)
	if s.Workloads["Succeeded"] != 1 || s.Workloads["Deferred"] != 1 || len(s.OldContainers) != 2 {
		t.Fatalf("summary %+v", s)
	}
	var b strings.Builder
	if err := WriteTable(&b, []Status{s}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"python  generation 3 (sha256:2c368792963f…)  approved True (Approved)",
		"[██████████░░░░░░░░░░] 3/6 current · 2 installing · 1 failed · 0 stuck · 1 excluded  (Rotating)",
		"excluded n6: PrivilegedRuntimeFile (generation 3)",
		"nodes without a running agent: n7 (AgentContainerFailing) (NodeProfile general)",
		"1 Succeeded · 1 Deferred", "Deployment shop/batch Deferred: the Deployment is paused",
		"RESTARTS HALTED: 2 restarted workload(s) failed", "FAILED STARTS  2 pod(s) on 2 node(s) had a container exit with an error", "ROLLED BACK RolledBack: generation 2 (sha256:9) failed restarted workloads", "old containers (2):", "stale", "batch-1", "9 (previous epoch)", "… and 4 more node(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "shop/web Succeeded") {
		t.Errorf("succeeded workloads are counted, not listed:\n%s", out)
	}
}

// With more workloads than records, the counts are the status's exact ones and the table
// says how many it does not list.
func TestStatusCountsBeyondRecords(t *testing.T) {
	ri := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "python", UID: "e-1"}}
	ri.Status = brewletv1.RuntimeImageStatus{Epoch: "e-1", Generation: 3, Rotation: &brewletv1.RotationStatus{
		Restarts:      []brewletv1.WorkloadRestart{{Kind: "Deployment", Namespace: "shop", Name: "web", Outcome: "Pending", Message: "waiting"}},
		RestartCounts: &brewletv1.RestartCounts{Pending: 390, Succeeded: 100, InProgress: 5}}}
	s := StatusOf(ri)
	if s.Workloads["Pending"] != 390 || s.Workloads["Succeeded"] != 100 || s.Workloads["InProgress"] != 5 {
		t.Fatalf("workloads %v", s.Workloads)
	}
	var b strings.Builder
	if err := WriteTable(&b, []Status{s}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"100 Succeeded · 5 InProgress · 390 Pending", "and 394 more not listed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestStatusUsage(t *testing.T) {
	var out, errOut strings.Builder
	if code := Main([]string{"status", "-o", "xml"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "want table, json or yaml") {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}

// --context picks a context of the kubeconfig other than its current one; an unknown one is
// refused, never replaced by the current context.
func TestStatusContext(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: prod
  cluster: {server: "https://prod.example:6443"}
- name: staging
  cluster: {server: "https://staging.example:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: prod
  context: {cluster: prod, user: u}
- name: staging
  context: {cluster: staging, user: u}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for ctx, want := range map[string]string{"": "https://prod.example:6443", "staging": "https://staging.example:6443"} {
		cfg, err := statusConfig(kc, ctx)
		if err != nil || cfg.Host != want {
			t.Errorf("--context %q: host %v, %v; want %s", ctx, cfg, err, want)
		}
	}
	if _, err := statusConfig(kc, "nowhere"); err == nil || !strings.Contains(err.Error(), "--context") {
		t.Errorf("an unknown context: %v", err)
	}
}
