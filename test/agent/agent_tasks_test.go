package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/agent"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/provisioner/tasks"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The node report is reconciled against containerd's live tasks (docs/provisioner.md, "Task report"): a Brewlet
// container running through CRI is reported as a task; a lease left behind by a container
// containerd no longer has is released by the agent and no longer reported, and the report
// stays complete; with containerd unreachable every lease is reported as it is and the
// report is incomplete; a Brewlet container running without a lease makes it incomplete.
func TestAgentReportsLiveTasks(t *testing.T) {
	e := newAgentEnv(t, "Eager")
	n, c, nodeName, ri, must := e.n, e.c, e.nodeName, e.ri, e.must
	ctx := context.Background()
	host := hoststate.Under(n.HostPrefix)
	var mu sync.Mutex
	var logs []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(format, args...))
		t.Logf(format, args...)
	}
	logged := func(substr string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range logs {
			if strings.Contains(l, substr) {
				return true
			}
		}
		return false
	}
	ctrd := &tasks.Containerd{Socket: n.Socket}
	ag := &agent.Agent{Client: c, NodeName: nodeName, Layout: host, AuthTTL: 2 * time.Minute, Log: logf,
		Tasks:     ctrd,
		Installer: &install.Installer{Layout: host, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}}
	defer ag.Close()
	must(host.CloseFence())
	must(ag.ReconcileAndWait(ctx))
	// containerd's task events wake the agent for Brewlet containers (subscribed long before
	// the first container starts: the image and CLI are built in between).
	wake := make(chan struct{}, 1)
	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	go tasks.Events{Socket: n.Socket, Layout: host, Log: logf}.Run(evCtx, wake)
	woken := func(t *testing.T, after string) {
		t.Helper()
		select {
		case <-wake:
		case <-time.After(15 * time.Second):
			t.Errorf("containerd's task events woke no pass within 15s after %s", after)
		}
	}

	report := func(t *testing.T) *brewletv1.NodeRuntime {
		t.Helper()
		nrt := &brewletv1.NodeRuntime{}
		must(c.Get(ctx, client.ObjectKey{Name: nodeName}, nrt))
		return nrt
	}
	podNames := func(nrt *brewletv1.NodeRuntime) []string {
		var out []string
		for _, tk := range nrt.Status.Tasks {
			out = append(out, tk.PodName)
		}
		sort.Strings(out)
		return out
	}
	if nrt := report(t); !nrt.Status.Complete || len(nrt.Status.Tasks) != 0 {
		t.Fatalf("empty node: complete %v tasks %+v", nrt.Status.Complete, nrt.Status.Tasks)
	}

	d := &kit.DataPath{N: n, Host: host, Epoch: string(ri.UID), CLI: kit.BuildCLI(t)}
	d.App = kit.PushHello(t, d.CLI, n.Registry)
	sleep := func(c *runtimeapi.ContainerConfig) {
		c.Command = []string{"python", "-c", "import time; time.sleep(3600)"}
	}
	cid, pod, err := d.Start(t, nil, sleep)
	if err != nil {
		t.Fatalf("start a Brewlet container: %v", err)
	}
	live := pod.Metadata.Name

	t.Run("a running container is reported", func(t *testing.T) {
		woken(t, "a Brewlet container started")
		must(ag.Reconcile(ctx))
		nrt := report(t)
		if !nrt.Status.Complete || len(nrt.Status.Tasks) != 1 {
			t.Fatalf("complete %v tasks %+v", nrt.Status.Complete, nrt.Status.Tasks)
		}
		tk := nrt.Status.Tasks[0]
		if tk.PodName != live || string(tk.PodUID) != pod.Metadata.Uid || tk.ContainerName != "app" ||
			tk.ID != kit.PyID || tk.Epoch != ri.UID || tk.Generation != 1 {
			t.Fatalf("task %+v for pod %s/%s", tk, pod.Metadata.Name, pod.Metadata.Uid)
		}
	})

	t.Run("a container exiting with an error right after its start is reported as a failed start", func(t *testing.T) {
		cid, pod, err := d.Start(t, nil, func(c *runtimeapi.ContainerConfig) {
			c.Command = []string{"python", "-c", "import sys; sys.exit(5)"}
		})
		if err != nil {
			t.Fatal(err)
		}
		if code, log := kit.Exited(t, n, cid, pod, "app.log"); code != 5 {
			t.Fatalf("exit code %d: %s", code, log)
		}
		if _, err := n.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cid}); err != nil {
			t.Fatal(err)
		}
		must(ag.Reconcile(ctx))
		fs := report(t).Status.FailedStarts
		if len(fs) != 1 || fs[0].PodName != pod.Metadata.Name || string(fs[0].PodUID) != pod.Metadata.Uid || fs[0].ContainerName != "app" ||
			fs[0].ID != kit.PyID || fs[0].Epoch != ri.UID || fs[0].Generation != 1 || fs[0].ExitCode != 5 || fs[0].ExitedAt.IsZero() {
			t.Fatalf("failed starts %+v, want the container of pod %s that exited with 5", fs, pod.Metadata.Name)
		}
	})

	// What a shim that died before its delete leaves behind: a lease, and exec state, of a
	// container containerd no longer has, written as the shim writes it (an hour ago).
	ghost := strings.Repeat("9f", 32)
	if _, err := host.LeaseCurrent(hoststate.Lease{ContainerID: ghost, ID: kit.PyID, PodNamespace: "default", PodName: "ghost",
		PodUID: "ghost-uid", ContainerName: "app", CreatedAt: time.Now().Add(-time.Hour).UTC()}); err != nil {
		t.Fatal(err)
	}
	must(os.MkdirAll(host.ContainerDir(ghost), 0o700))

	t.Run("containerd unreachable: leases reported as they are, incomplete", func(t *testing.T) {
		ag.Tasks = &tasks.Containerd{Socket: filepath.Join(t.TempDir(), "no-containerd.sock")}
		defer func() { ag.Tasks = ctrd }()
		must(ag.Reconcile(ctx))
		nrt := report(t)
		if nrt.Status.Complete {
			t.Error("complete without containerd")
		}
		want := []string{live, "ghost"}
		sort.Strings(want)
		if got := podNames(nrt); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("tasks %v, want %v", got, want)
		}
		for _, id := range []string{cid, ghost} {
			if _, err := os.Stat(host.LeaseFile(id)); err != nil {
				t.Errorf("lease %s dropped without containerd: %v", id, err)
			}
		}
	})

	t.Run("a lease whose container containerd no longer has is released", func(t *testing.T) {
		must(ag.Reconcile(ctx))
		nrt := report(t)
		if !nrt.Status.Complete {
			t.Error("incomplete although containerd answered")
		}
		if got := podNames(nrt); len(got) != 1 || got[0] != live {
			t.Errorf("tasks %v, want only %s", got, live)
		}
		if _, err := os.Stat(host.LeaseFile(ghost)); !os.IsNotExist(err) {
			t.Errorf("stale lease kept: %v", err)
		}
		if _, err := os.Stat(host.ContainerDir(ghost)); !os.IsNotExist(err) {
			t.Errorf("stale exec state kept: %v", err)
		}
		if !logged("released the lease of container " + ghost) {
			t.Error("the release was not logged")
		}
		if _, err := os.Stat(host.LeaseFile(cid)); err != nil {
			t.Errorf("the running container's lease: %v", err)
		}
		rv := nrt.ResourceVersion
		must(ag.Reconcile(ctx))
		if report(t).ResourceVersion != rv {
			t.Error("an unchanged pass rewrote NodeRuntime status")
		}
	})

	t.Run("a removed container is no longer reported", func(t *testing.T) {
		select {
		case <-wake:
		default:
		}
		_, err := n.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cid, Timeout: 5})
		must(err)
		woken(t, "a Brewlet container stopped")
		_, err = n.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cid})
		must(err)
		must(ag.Reconcile(ctx))
		nrt := report(t)
		if !nrt.Status.Complete || len(nrt.Status.Tasks) != 0 {
			t.Errorf("complete %v tasks %+v", nrt.Status.Complete, nrt.Status.Tasks)
		}
	})

	t.Run("a Brewlet container running without a lease makes the report incomplete", func(t *testing.T) {
		cid2, pod2, err := d.Start(t, nil, sleep)
		if err != nil {
			t.Fatal(err)
		}
		must(os.Remove(host.LeaseFile(cid2)))
		must(ag.Reconcile(ctx))
		if nrt := report(t); nrt.Status.Complete {
			t.Errorf("complete although %s (pod %s) runs without a lease: tasks %+v", cid2, pod2.Metadata.Name, nrt.Status.Tasks)
		}
		if !logged("without a lease") {
			t.Error("the unleased container was not logged")
		}
	})
}
