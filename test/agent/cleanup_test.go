package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/agent"
	"brewlet.sh/brewlet/internal/provisioner/containerd"
	"brewlet.sh/brewlet/internal/provisioner/gc"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/provisioner/tasks"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// Deleting a NodeProfile cleans its node up for real: the runtime is removed from disk,
// containerd's config gets back its exact bytes (a main config without imports, so the
// handler was written into it), the shim Brewlet installed is gone, the brewlet.sh labels
// are withdrawn, and only then does the profile's finalizer go. A failing cleanup step
// (containerd's restart) keeps the finalizer, says why in the ledger, and is retried.
func TestAgentCleansTheNodeOnProfileDeletion(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	n := framework.StartNodeWith(t, framework.NodeOptions{WithoutBrewletHandler: true})
	kit.StartOperator(t, cp, false)
	ctx, c := context.Background(), cp.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	nodeName := "node-" + n.ID
	refs := kit.BuildRuntimes(t, n.Registry, "python")
	must(c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"node-restriction.kubernetes.io/pool": "general"}}}))
	ri := kit.RuntimeImage(kit.PyID, refs["python1"])
	must(c.Create(ctx, ri))
	kit.WaitGeneration(t, c, ri, 1)
	must(c.Create(ctx, &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}, Spec: brewletv1.NodeProfileSpec{
		NodePool:      brewletv1.NodePool{Key: "node-restriction.kubernetes.io/pool", Names: []string{"general"}},
		RuntimeImages: []brewletv1.OfferedRuntime{{ID: kit.PyID, Install: "Eager"}}}}))

	before, err := os.ReadFile(n.ConfigPath)
	must(err)
	host := hoststate.Under(n.HostPrefix)
	shimDir := t.TempDir()
	failRestart := false
	cd := &containerd.Handler{ConfigPath: n.ConfigPath, Binary: framework.Tool(t, "containerd"), WriteOptions: host.WriteHandlerOptions,
		Restart: func(ctx context.Context) error {
			if failRestart {
				return errors.New("simulated: systemctl restart containerd failed")
			}
			return n.RestartContainerd(ctx)
		},
		Health: func(ctx context.Context) error { return kit.HandlerListed(ctx, n) }}
	ag := &agent.Agent{Client: c, NodeName: nodeName, Layout: host, AuthTTL: 2 * time.Minute, Log: t.Logf,
		Installer: &install.Installer{Layout: host, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}},
		// A long grace: a node no profile selects removes unused runtimes without it.
		Collector: &gc.Collector{Layout: host, Grace: time.Hour, MountInfo: "/proc/self/mountinfo"},
		Tasks:     &tasks.Containerd{Socket: n.Socket},
		HostSetup: &containerd.HostChanges{Layout: host, Containerd: cd,
			ShimSource: filepath.Join(n.BinDir, vocab.ShimBinaryName), ShimDir: shimDir},
		ContainerdMode: vocab.ContainerdRestartValidated}
	defer ag.Close()
	must(host.CloseFence())
	kit.Eventually(t, time.Minute, "the profile's finalizer, the node served and installed", func() (bool, string) {
		if err := ag.ReconcileAndWait(ctx); err != nil {
			return false, err.Error()
		}
		p := &brewletv1.NodeProfile{}
		must(c.Get(ctx, client.ObjectKey{Name: "general"}, p))
		cur, err := host.Current(kit.PyID)
		return len(p.Finalizers) == 1 && len(p.Status.Ledger) == 1 && err == nil && cur.Generation == 1,
			fmt.Sprintf("finalizers %v, ledger %+v, current %v %v", p.Finalizers, p.Status.Ledger, cur, err)
	})
	if b, _ := os.ReadFile(n.ConfigPath); !strings.Contains(string(b), vocab.ShimRuntimeType) {
		t.Fatalf("the handler was not registered in the main config:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(shimDir, vocab.ShimBinaryName)); err != nil {
		t.Fatalf("shim not installed: %v", err)
	}
	node := &corev1.Node{}
	must(c.Get(ctx, client.ObjectKey{Name: nodeName}, node))
	if node.Labels[vocab.RuntimeLabel(kit.PyID)] != vocab.LabelValueReady || node.Labels[vocab.LabelHostChanges] != vocab.LabelValuePresent {
		t.Fatalf("labels while served: %v", node.Labels)
	}
	p := &brewletv1.NodeProfile{}
	must(c.Get(ctx, client.ObjectKey{Name: "general"}, p))
	if e := p.Status.Ledger[0]; e.NodeName != nodeName || e.NodeUID != node.UID || !e.ContainerdConfig || e.Owed ||
		strings.Join(e.RuntimeImages, ",") != kit.PyID {
		t.Fatalf("ledger entry %+v", e)
	}

	// Delete the profile while containerd cannot restart: the runtime goes, the config is
	// put back and rolled back again, the finalizer holds and the ledger says why.
	failRestart = true
	must(c.Delete(ctx, p))
	kit.Eventually(t, time.Minute, "the failed step reported in the ledger", func() (bool, string) {
		if err := ag.Reconcile(ctx); err != nil {
			return false, err.Error()
		}
		p := &brewletv1.NodeProfile{}
		must(c.Get(ctx, client.ObjectKey{Name: "general"}, p))
		cond := meta.FindStatusCondition(p.Status.Conditions, string(vocab.ConditionCleanupComplete))
		msg := ""
		if len(p.Status.Ledger) == 1 {
			msg = p.Status.Ledger[0].Message
		}
		return len(p.Finalizers) == 1 && cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(msg, "simulated") &&
			p.Status.Ledger[0].Owed && len(p.Status.Ledger[0].RuntimeImages) == 0, fmt.Sprintf("finalizers %v, %+v, ledger %+v", p.Finalizers, cond, p.Status.Ledger)
	})
	if b, _ := os.ReadFile(n.ConfigPath); !strings.Contains(string(b), vocab.ShimRuntimeType) {
		t.Fatalf("a failed cleanup step must leave containerd as it ran (rolled back):\n%s", b)
	}
	if gens, _ := host.Generations(kit.PyID); len(gens) != 0 {
		t.Fatalf("the runtime is still on disk: %v", gens)
	}

	// containerd restarts again: the retry completes, then the profile goes.
	failRestart = false
	kit.Eventually(t, time.Minute, "the profile deleted after cleanup", func() (bool, string) {
		if err := ag.Reconcile(ctx); err != nil {
			return false, err.Error()
		}
		err := c.Get(ctx, client.ObjectKey{Name: "general"}, &brewletv1.NodeProfile{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
	if b, _ := os.ReadFile(n.ConfigPath); string(b) != string(before) {
		t.Fatalf("containerd's config after cleanup:\n%s\nwant, byte for byte:\n%s", b, before)
	}
	if _, err := os.Stat(filepath.Join(shimDir, vocab.ShimBinaryName)); !os.IsNotExist(err) {
		t.Fatalf("shim left after cleanup: %v", err)
	}
	if err := kit.HandlerListed(ctx, n); err == nil {
		t.Fatal("containerd still lists the brewlet handler")
	}
	must(c.Get(ctx, client.ObjectKey{Name: nodeName}, node))
	for k := range node.Labels {
		if strings.HasPrefix(k, vocab.Domain+"/") {
			t.Errorf("label %s left on the node", k)
		}
	}
	nrt := &brewletv1.NodeRuntime{}
	must(c.Get(ctx, client.ObjectKey{Name: nodeName}, nrt))
	if cl := nrt.Status.Cleanup; cl == nil || !cl.Done || cl.ShimInstalled || cl.ContainerdHandlerRegistered || len(cl.InstalledRuntimes) != 0 {
		t.Fatalf("NodeRuntime status.cleanup %+v", cl)
	}
	if owed, err := ag.HostSetup.Recorded(); owed || err != nil {
		t.Fatalf("host record after cleanup: %v %v", owed, err)
	}
	// Nothing of Brewlet's is left under its roots (the startup fence's included), and
	// later passes keep it so.
	must(ag.Reconcile(ctx))
	for _, root := range []string{host.Runtimes, host.State, host.Run} {
		if ents, err := os.ReadDir(root); err != nil && !os.IsNotExist(err) || len(ents) != 0 {
			t.Errorf("%s after cleanup: %v %v", root, ents, err)
		}
	}

	// A profile selecting the node again: the fence opens once the node is served.
	must(c.Create(ctx, &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "again"}, Spec: brewletv1.NodeProfileSpec{
		NodePool:      brewletv1.NodePool{Key: "node-restriction.kubernetes.io/pool", Names: []string{"general"}},
		RuntimeImages: []brewletv1.OfferedRuntime{{ID: kit.PyID, Install: "Eager"}}}}))
	kit.Eventually(t, time.Minute, "the fence open on a node selected again", func() (bool, string) {
		if err := ag.ReconcileAndWait(ctx); err != nil {
			return false, err.Error()
		}
		err := host.CheckFence()
		return err == nil, fmt.Sprintf("%v", err)
	})
}
