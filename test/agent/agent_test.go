package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/agent"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/framework/testimage"
	"brewlet.sh/brewlet/test/kit"
)

// The provisioner's loop, against a real API server and a real node: installs what the
// node's profile offers, authorizes it, labels its own node and reports NodeRuntime status;
// follows a rotation; lets authorizations expire while the API server is gone and renews
// them when it returns; revokes at once when the RuntimeImage is deleted.
func TestAgentInstallsAuthorizesAndRevokes(t *testing.T) {
	e := newAgentEnv(t, "Eager")
	cp, n, c, refs, nodeName, ri, must := e.cp, e.n, e.c, e.refs, e.nodeName, e.ri, e.must
	ctx := context.Background()
	host := hoststate.Under(n.HostPrefix)
	// A long authorization for the flow (a slow machine must not expire it between steps);
	// the expiry subtest shortens it.
	ag := &agent.Agent{Client: c, NodeName: nodeName, Layout: host, AuthTTL: 2 * time.Minute, Log: t.Logf,
		Installer: &install.Installer{Layout: host, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}}
	defer ag.Close()
	ag.Host = &brewletv1.NodeCleanup{ShimInstalled: true, ContainerdHandlerRegistered: true} // what PrepareHost reported
	must(host.CloseFence())                                                                  // as Run does at start
	// The per-ID and host-changes keys of releases before node-restriction labels, left by
	// an old agent: removed.
	must(kit.LabelNode(ctx, c, nodeName, vocab.LegacyLabelRuntimePrefix+kit.PyID, "ready"))
	must(kit.LabelNode(ctx, c, nodeName, vocab.LegacyLabelHostChanges, vocab.LabelValuePresent))
	must(ag.ReconcileAndWait(ctx))

	node := &corev1.Node{}
	must(c.Get(ctx, client.ObjectKey{Name: nodeName}, node))
	if node.Labels[vocab.LabelRuntime] != "ready" || node.Labels[vocab.RuntimeLabel(kit.PyID)] != "ready" || node.Labels["node-restriction.kubernetes.io/pool"] != "general" {
		t.Fatalf("node labels %v", node.Labels)
	}
	if _, ok := node.Labels[vocab.LegacyLabelRuntimePrefix+kit.PyID]; ok || node.Labels[vocab.LabelRuntimeInfo] != "ready" {
		t.Errorf("legacy per-ID label kept or the readiness mirror for kubectl -L missing: %v", node.Labels)
	}
	if _, ok := node.Labels[vocab.LegacyLabelHostChanges]; ok {
		t.Errorf("legacy host-changes label kept: %v", node.Labels)
	}
	nrt := &brewletv1.NodeRuntime{}
	must(c.Get(ctx, client.ObjectKey{Name: nodeName}, nrt))
	if len(nrt.Status.Runtimes) != 1 || nrt.Status.Runtimes[0].State != "Ready" || nrt.Status.Runtimes[0].Generation != 1 ||
		nrt.Status.NodeUID != node.UID || len(nrt.OwnerReferences) != 1 || nrt.Status.Cleanup == nil || !nrt.Status.Cleanup.ContainerdHandlerRegistered {
		t.Fatalf("NodeRuntime %+v", nrt)
	}
	rv := nrt.ResourceVersion
	must(ag.ReconcileAndWait(ctx))
	must(c.Get(ctx, client.ObjectKey{Name: nodeName}, nrt))
	if nrt.ResourceVersion != rv {
		t.Fatal("an unchanged pass rewrote NodeRuntime status")
	}

	// The application runs on the runtime the agent installed and authorized.
	d := &kit.DataPath{N: n, Host: host, Epoch: string(ri.UID), CLI: kit.BuildCLI(t)}
	d.App = kit.PushHello(t, d.CLI, n.Registry)
	cid, pod, err := d.Start(t, nil, nil)
	if err != nil {
		t.Fatalf("app on agent-installed runtime: %v", err)
	}
	if out := d.Output(t, cid, pod); !strings.Contains(out, "GENERATION=1") {
		t.Fatalf("output: %s", out)
	}

	t.Run("rotation", func(t *testing.T) {
		must(c.Get(ctx, client.ObjectKeyFromObject(ri), ri))
		ri.Spec.Source.Image = refs["python2"]
		must(c.Update(ctx, ri))
		kit.WaitGeneration(t, c, ri, 2)
		must(ag.ReconcileAndWait(ctx))
		if cur, err := host.Current(kit.PyID); err != nil || cur.Generation != 2 {
			t.Fatalf("current after rotation: %v %v", cur, err)
		}
	})

	t.Run("authorization expires without the API server and renews after", func(t *testing.T) {
		ttl := 3 * time.Second
		ag.AuthTTL = ttl
		must(ag.ReconcileAndWait(ctx)) // the last confirmation before the node is cut off
		cp.StopAPIServer()
		if err := ag.Reconcile(ctx); err == nil {
			t.Fatal("a pass without the API server succeeded")
		}
		time.Sleep(ttl + time.Second)
		_, _, err := d.Start(t, nil, nil)
		kit.ExpectReason(t, err, vocab.ReasonRuntimeImageAuthorizationExpired)
		cp.StartAPIServer(t)
		ag.Client = cp.Client
		ag.AuthTTL = 2 * time.Minute
		must(ag.ReconcileAndWait(ctx))
		if _, _, err := d.Start(t, nil, nil); err != nil {
			t.Fatalf("start after renewal: %v", err)
		}
	})

	t.Run("each refused generation is reported and the current one stays in use", func(t *testing.T) {
		dir := func(n string) testimage.TarEntry { return testimage.TarEntry{Name: n, Mode: 0o755, Typeflag: '5'} }
		accounts := []testimage.TarEntry{dir("etc/"), {Name: "etc/passwd", Mode: 0o644, Body: []byte("app:x:10001:10001::/home/app:/bin/sh\n")},
			{Name: "etc/group", Mode: 0o644, Body: []byte("app:x:10001:\n")}, dir("usr/"), dir("usr/bin/")}
		gen := int64(2)
		for _, tc := range []struct {
			name    string
			entries []testimage.TarEntry
			env     []string
			reason  vocab.Reason
		}{
			{"setuid", append(accounts, testimage.TarEntry{Name: "usr/bin/su", Mode: 0o4755, Body: []byte("ELF")}), nil, vocab.ReasonPrivilegedRuntimeFile},
			{"path", accounts, []string{"PATH=/usr/bin:/opt/missing"}, vocab.ReasonInvalidRuntimePath},
			{"accounts", accounts[:2], nil, vocab.ReasonInvalidAccountFiles},
		} {
			bad := kit.PushRuntime(t, n.Registry+"/runtimes/python:bad-"+tc.name, tc.entries, tc.env)
			must(c.Get(ctx, client.ObjectKeyFromObject(ri), ri))
			ri.Spec.Source.Image = bad
			must(c.Update(ctx, ri))
			gen++
			kit.WaitGeneration(t, c, ri, gen)
			must(ag.ReconcileAndWait(ctx))
			must(c.Get(ctx, client.ObjectKey{Name: nodeName}, nrt))
			e := nrt.Status.Runtimes[0]
			if e.State != "Ready" || e.Generation != 2 || e.Reason != string(tc.reason) || !strings.Contains(e.Message, "refused") || e.FailedGeneration != gen {
				t.Fatalf("%s: NodeRuntime entry after a refused rotation: %+v", tc.name, e)
			}
			// The operator counts the refusal against the rotation's failure budget.
			kit.Eventually(t, 30*time.Second, "the rotation reports the refusing node", func() (bool, string) {
				got := &brewletv1.RuntimeImage{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(ri), got); err != nil {
					return false, err.Error()
				}
				r := got.Status.Rotation
				if r == nil || r.Target.Generation != gen || r.Nodes.Failed != 1 || len(r.ExcludedNodes) != 1 ||
					r.ExcludedNodes[0].Name != nodeName || r.ExcludedNodes[0].Reason != string(tc.reason) {
					return false, fmt.Sprintf("rotation %+v", r)
				}
				return true, ""
			})
		}
		if _, _, err := d.Start(t, nil, nil); err != nil {
			t.Fatalf("generation 2 no longer serves: %v", err)
		}
	})

	t.Run("deleting the RuntimeImage revokes at once", func(t *testing.T) {
		must(c.Delete(ctx, ri))
		must(ag.ReconcileAndWait(ctx))
		_, _, err := d.Start(t, nil, nil)
		kit.ExpectReason(t, err, vocab.ReasonRuntimeImageRevoked)
		must(c.Get(ctx, client.ObjectKey{Name: nodeName}, node))
		for k := range node.Labels {
			if strings.HasPrefix(k, "brewlet.sh/") {
				t.Errorf("label %s left after revocation", k)
			}
		}
		must(c.Get(ctx, client.ObjectKey{Name: nodeName}, nrt))
		if nrt.Status.Runtimes[0].State != "Revoked" {
			t.Fatalf("NodeRuntime after revocation: %+v", nrt.Status.Runtimes)
		}
	})

	t.Run("a recreated RuntimeImage starts a new epoch and adopts nothing", func(t *testing.T) {
		old := ri.UID
		// Wait until the API server has really removed the old object.
		deadline := time.Now().Add(30 * time.Second)
		for c.Get(ctx, client.ObjectKeyFromObject(ri), &brewletv1.RuntimeImage{}) == nil && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		ri = kit.RuntimeImage(kit.PyID, refs["python1"])
		must(c.Create(ctx, ri))
		if ri.UID == old {
			t.Fatal("recreated RuntimeImage kept its UID")
		}
		kit.WaitGeneration(t, c, ri, 1)
		must(ag.ReconcileAndWait(ctx))
		cur, err := host.Current(kit.PyID)
		if err != nil || cur.Epoch != string(ri.UID) || cur.Generation != 1 {
			t.Fatalf("current after recreation: %v %v (new epoch %s)", cur, err, ri.UID)
		}
		auth, err := host.ReadAuthorization(kit.PyID)
		if err != nil || auth.Epoch != string(ri.UID) || auth.Revoked {
			t.Fatalf("authorization after recreation: %+v %v", auth, err)
		}
		cid, pod, err := d.Start(t, nil, nil)
		if err != nil {
			t.Fatalf("start on the new epoch: %v", err)
		}
		if out := d.Output(t, cid, pod); !strings.Contains(out, "GENERATION=1") {
			t.Fatalf("output: %s", out)
		}
	})
}

// An OnDemand runtime is offered (label "available", authorization) but not installed;
// the first container that needs it asks the agent, which installs it while the shim waits;
// without an agent to answer, the start fails with RuntimeImageInstalling after the bound.
func TestAgentOnDemandInstall(t *testing.T) {
	e := newAgentEnv(t, "OnDemand")
	n, c, nodeName, ri, must := e.n, e.c, e.nodeName, e.ri, e.must
	ctx := context.Background()
	host := hoststate.Under(n.HostPrefix)
	// A period far longer than the shim's OnDemand wait: only the request can wake the agent.
	ag := &agent.Agent{Client: c, NodeName: nodeName, Layout: host, AuthTTL: 5 * time.Minute, Period: 2 * time.Minute, Log: t.Logf,
		Installer: &install.Installer{Layout: host, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}}
	defer ag.Close()
	must(ag.ReconcileAndWait(ctx))
	node := &corev1.Node{}
	must(c.Get(ctx, client.ObjectKey{Name: nodeName}, node))
	if node.Labels[vocab.RuntimeLabel(kit.PyID)] != "available" || node.Labels[vocab.LabelRuntime] != "ready" {
		t.Fatalf("labels %v", node.Labels)
	}
	if _, err := host.Current(kit.PyID); err == nil {
		t.Fatal("an OnDemand runtime was installed before any container asked")
	}
	d := &kit.DataPath{N: n, Host: host, Epoch: string(ri.UID), CLI: kit.BuildCLI(t)}
	d.App = kit.PushHello(t, d.CLI, n.Registry)

	// No agent running: the shim's bounded wait ends with RuntimeImageInstalling.
	_, _, err := d.Start(t, nil, nil)
	kit.ExpectReason(t, err, vocab.ReasonRuntimeImageInstalling)

	// With the agent running (and a period of an hour), the request wakes it.
	run := func() (stop func()) {
		runCtx, cancel := context.WithCancel(ctx)
		ran := make(chan struct{})
		must(host.CloseFence()) // an agent (re)start: the fence is closed until its first pass
		go func() { defer close(ran); _ = ag.Run(runCtx) }()
		deadline := time.Now().Add(30 * time.Second)
		for host.CheckFence() != nil {
			if time.Now().After(deadline) {
				t.Fatal("the agent never opened the startup fence")
			}
			time.Sleep(100 * time.Millisecond)
		}
		return func() { cancel(); <-ran } // Run returns once its installs stopped
	}
	stop := run()
	defer func() { stop() }()
	cid, pod, err := d.Start(t, nil, nil)
	if err != nil {
		t.Fatalf("first start of an OnDemand runtime: %v", err)
	}
	if out := d.Output(t, cid, pod); !strings.Contains(out, "GENERATION=1") {
		t.Fatalf("output: %s", out)
	}

	// The RuntimeImage is recreated while the old epoch stays installed: the next start
	// asks for the new epoch as on first use, and runs on it.
	// The agent's passes are driven by hand here (its period is long and nothing wakes it).
	stop()
	stop = func() {}
	old := ri.UID
	must(c.Delete(ctx, ri))
	deadline := time.Now().Add(time.Minute)
	for c.Get(ctx, client.ObjectKeyFromObject(ri), &brewletv1.RuntimeImage{}) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the deleted RuntimeImage is still there (its finalizer waits for this node)")
		}
		must(ag.ReconcileAndWait(ctx))
		time.Sleep(200 * time.Millisecond)
	}
	ri = kit.RuntimeImage(kit.PyID, e.refs["python1"])
	must(c.Create(ctx, ri))
	if ri.UID == old {
		t.Fatal("recreated RuntimeImage kept its UID")
	}
	kit.WaitGeneration(t, c, ri, 1)
	must(ag.ReconcileAndWait(ctx))
	if auth, err := host.ReadAuthorization(kit.PyID); err != nil || auth.Epoch != string(ri.UID) || !auth.OnDemand || auth.Revoked {
		t.Fatalf("the new epoch is not offered: %+v %v", auth, err)
	}
	stop = run()
	if cur, err := host.Current(kit.PyID); err != nil || cur.Epoch != string(old) {
		t.Fatalf("current %v %v: the old epoch should still be installed", cur, err)
	}
	cid, pod, err = d.Start(t, nil, nil)
	if err != nil {
		t.Fatalf("start after the RuntimeImage was recreated: %v", err)
	}
	if cur, err := host.Current(kit.PyID); err != nil || cur.Epoch != string(ri.UID) {
		t.Fatalf("current %v %v, want the new epoch %s", cur, err, ri.UID)
	}
	if out := d.Output(t, cid, pod); !strings.Contains(out, "GENERATION=1") {
		t.Fatalf("output: %s", out)
	}
}

// agentEnv is a control plane, a node with the CPython runtimes in its registry, the
// node's Node object in pool "general", a RuntimeImage at generation 1, and a NodeProfile
// offering it with the given install mode.
type agentEnv struct {
	cp       *framework.ControlPlane
	n        *framework.Node
	c        client.Client
	refs     map[string]string
	nodeName string
	ri       *brewletv1.RuntimeImage
	op       *kit.RunningOperator
	must     func(error)
}

func newAgentEnv(t *testing.T, install string) *agentEnv {
	t.Helper()
	e := &agentEnv{cp: framework.StartControlPlane(t, framework.ControlPlaneOptions{}), n: framework.StartNode(t)}
	e.op = kit.StartOperator(t, e.cp, false) // generations, approval and NodeRuntime spec come from the operator
	ctx := context.Background()
	e.c, e.nodeName = e.cp.Client, "node-"+e.n.ID
	e.must = func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	e.refs = kit.BuildRuntimes(t, e.n.Registry, "python")
	e.must(e.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.nodeName, Labels: map[string]string{"node-restriction.kubernetes.io/pool": "general"}}}))
	e.ri = kit.RuntimeImage(kit.PyID, e.refs["python1"])
	e.must(e.c.Create(ctx, e.ri))
	kit.WaitGeneration(t, e.c, e.ri, 1)
	e.must(e.c.Create(ctx, &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}, Spec: brewletv1.NodeProfileSpec{
		NodePool:      brewletv1.NodePool{Key: "node-restriction.kubernetes.io/pool", Names: []string{"general"}},
		RuntimeImages: []brewletv1.OfferedRuntime{{ID: kit.PyID, Install: install}}}}))
	return e
}
