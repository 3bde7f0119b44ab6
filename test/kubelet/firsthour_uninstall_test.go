package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/cluster"
	"brewlet.sh/brewlet/test/firsthour"
	"brewlet.sh/brewlet/test/kit"
)

// nodeSnapshot is what Brewlet may change on a node: files under its roots (path and
// content digest; directories the kubelet creates for hostPath volumes are not files),
// containerd's config, the brewlet.sh labels and the mounts below the node's prefix.
type nodeSnapshot struct {
	Files  []string
	Config string
	Labels []string
	Mounts []string
}

func snapshotNode(t *testing.T, c *cluster.Cluster, cl client.Client) nodeSnapshot {
	t.Helper()
	var s nodeSnapshot
	for _, root := range []string{"opt/brewlet", "var/lib/brewlet", "run/brewlet"} {
		dir := filepath.Join(c.HostPrefix, root)
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, rerr := os.ReadFile(p)
			sum := sha256.Sum256(b)
			if rerr != nil || d.Type()&fs.ModeSymlink != 0 {
				target, _ := os.Readlink(p)
				s.Files = append(s.Files, p+" -> "+target)
				return nil
			}
			s.Files = append(s.Files, p+" "+hex.EncodeToString(sum[:8]))
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(c.ContainerdConfig)
	if err != nil {
		t.Fatal(err)
	}
	s.Config = string(b)
	node := &corev1.Node{}
	if err := cl.Get(context.Background(), client.ObjectKey{Name: c.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	for k, v := range node.Labels {
		if strings.HasPrefix(k, vocab.Domain+"/") {
			s.Labels = append(s.Labels, k+"="+v)
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		for _, root := range []string{"opt/brewlet", "var/lib/brewlet"} {
			if strings.Contains(l, filepath.Join(c.HostPrefix, root)) {
				f := strings.Fields(l)
				s.Mounts = append(s.Mounts, f[4]) // the mount point
			}
		}
	}
	slices.Sort(s.Files)
	slices.Sort(s.Labels)
	slices.Sort(s.Mounts)
	return s
}

// firstHourUninstall: the Brewlet workloads are removed, then `helm uninstall` runs the
// chart's pre-delete hook, which deletes the profile and the RuntimeImages and waits for the
// node's cleanup; afterwards the node is as it was before the install.
func firstHourUninstall(t *testing.T, f *firsthour.Flow, before nodeSnapshot) {
	ctx := context.Background()
	cl := f.Clients.CL
	// Brewlet's pods go first: cleanup waits for every container on a Brewlet runtime.
	var deps appsv1.DeploymentList
	if err := cl.List(ctx, &deps); err != nil {
		t.Fatal(err)
	}
	for i := range deps.Items {
		if d := &deps.Items[i]; d.Spec.Template.Spec.RuntimeClassName != nil && *d.Spec.Template.Spec.RuntimeClassName == vocab.RuntimeClassName {
			if err := cl.Delete(ctx, d); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	if err := cl.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(firsthour.AppNamespace)); err != nil {
		t.Fatal(err)
	}
	kit.Eventually(t, 3*time.Minute, "no Brewlet pod left", func() (bool, string) {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods); err != nil {
			return false, err.Error()
		}
		var left []string
		for _, p := range pods.Items {
			if p.Spec.RuntimeClassName != nil && *p.Spec.RuntimeClassName == vocab.RuntimeClassName {
				left = append(left, p.Namespace+"/"+p.Name)
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	// The agent that removes the runtimes is the one running now (no restart needed).
	var agents corev1.PodList
	if err := cl.List(ctx, &agents, client.InNamespace(firsthour.Namespace), client.MatchingLabels{"app.kubernetes.io/component": "provisioner"}); err != nil {
		t.Fatal(err)
	}
	if len(agents.Items) != 1 {
		t.Fatalf("%d agent pods", len(agents.Items))
	}
	agentUID := agents.Items[0].UID
	start, restarts := time.Now(), f.C.Node.Restarts()
	out, err := f.Helm(ctx, "uninstall", firsthour.Release, "--namespace", firsthour.Namespace, "--wait", "--timeout", "15m")
	if err != nil {
		logs, _ := f.Kubectl(ctx, "-n", firsthour.Namespace, "logs", "job/brewlet-uninstall")
		t.Fatalf("helm uninstall: %v\n%s\nhook log:\n%s", err, out, logs)
	}
	t.Logf("helm uninstall took %s:\n%s", time.Since(start).Round(time.Second), out)
	var profiles brewletv1.NodeProfileList
	var images brewletv1.RuntimeImageList
	if err := cl.List(ctx, &profiles); err != nil {
		t.Fatal(err)
	}
	if err := cl.List(ctx, &images); err != nil {
		t.Fatal(err)
	}
	if len(profiles.Items)+len(images.Items) != 0 {
		t.Errorf("left after uninstall: %d NodeProfiles, %d RuntimeImages", len(profiles.Items), len(images.Items))
	}
	kit.Eventually(t, 2*time.Minute, "the agent pod gone", func() (bool, string) {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(firsthour.Namespace)); err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods in %s", len(pods.Items), firsthour.Namespace)
	})
	nrt := &brewletv1.NodeRuntime{}
	if err := cl.Get(ctx, client.ObjectKey{Name: f.C.NodeName}, nrt); err != nil {
		t.Fatal(err)
	}
	if cl := nrt.Status.Cleanup; cl == nil || !cl.Done || len(cl.InstalledRuntimes) != 0 || nrt.Status.AgentPodUID != agentUID || len(nrt.Status.Runtimes) != 0 {
		t.Errorf("NodeRuntime after uninstall: agent %s (want %s), runtimes %+v, cleanup %+v", nrt.Status.AgentPodUID, agentUID, nrt.Status.Runtimes, cl)
	}
	// Restored with the node's own tools: containerd restarted from the agent's pod.
	if f.C.Node.Restarts() <= restarts {
		t.Errorf("containerd not restarted by the uninstall (%d restarts before, %d after)", restarts, f.C.Node.Restarts())
	}
	after := snapshotNode(t, f.C, cl)
	if diff := snapshotDiff(before, after); diff != "" {
		t.Fatalf("the node differs from before the install:\n%s", diff)
	}
}

func snapshotDiff(a, b nodeSnapshot) string {
	var out []string
	list := func(what string, x, y []string) {
		for _, v := range y {
			if !slices.Contains(x, v) {
				out = append(out, fmt.Sprintf("%s added: %s", what, v))
			}
		}
		for _, v := range x {
			if !slices.Contains(y, v) {
				out = append(out, fmt.Sprintf("%s removed: %s", what, v))
			}
		}
	}
	list("file", a.Files, b.Files)
	list("label", a.Labels, b.Labels)
	list("mount", a.Mounts, b.Mounts)
	if a.Config != b.Config {
		out = append(out, "containerd's config changed:\n"+b.Config)
	}
	return strings.Join(out, "\n")
}
