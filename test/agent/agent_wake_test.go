package agent

import (
	"context"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/agent"
	"brewlet.sh/brewlet/internal/provisioner/clusterview"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// An agent pausing two minutes between passes still acts within seconds when its node's
// directives change (a rotation's wave allows generation 2) or a runtime is revoked: it
// watches its own NodeRuntime's spec and the RuntimeImages' approval, not the rotation
// counts every other node's report changes.
func TestAgentWakesOnChanges(t *testing.T) {
	e := newAgentEnv(t, "Eager")
	host, view := startWiredAgent(t, e)
	current := func() int64 {
		ref, err := host.Current(kit.PyID)
		if err != nil {
			return 0
		}
		g, err := host.ReadGeneration(kit.PyID, ref)
		if err != nil {
			return 0
		}
		return g.Generation
	}
	// Well within the first period: the first pass installs, the finished install wakes it.
	waitFor(t, 60*time.Second, "generation 1 installed", func() bool { return current() == 1 })

	// The operator writes the RuntimeImage too: read-modify-write with conflict retries.
	kit.UpdateRI(t, e.c, kit.PyID, func(ri *brewletv1.RuntimeImage) { ri.Spec.Source.Image = e.refs["python2"] })
	// Far less than a period: only the NodeRuntime spec change can have woken it.
	waitFor(t, 60*time.Second, "generation 2 installed after the rotation", func() bool { return current() == 2 })

	kit.UpdateRI(t, e.c, kit.PyID, func(ri *brewletv1.RuntimeImage) { ri.Spec.Revoked = true })
	waitFor(t, 30*time.Second, "the authorization revoked", func() bool {
		a, err := host.ReadAuthorization(kit.PyID)
		return err == nil && a.Revoked
	})
	if view.Confirmed.Load() == 0 {
		t.Fatalf("no pass was confirmed from the informers (%d fell back to full lists)", view.Fallbacks.Load())
	}
	t.Logf("passes confirmed from informers: %d, full-list fallbacks: %d", view.Confirmed.Load(), view.Fallbacks.Load())
}

// startWiredAgent runs an agent as brewlet-provisioner wires it, pausing two minutes between
// passes: informers confirmed each pass, RuntimeImage changes and the node's NodeRuntime spec
// waking the loop. It stops with the test.
func startWiredAgent(t *testing.T, e *agentEnv) (hoststate.Layout, *clusterview.View) {
	t.Helper()
	host := hoststate.Under(e.n.HostPrefix)
	wc, err := client.NewWithWatch(e.cp.Config, client.Options{Scheme: framework.Scheme()})
	e.must(err)
	wake := make(chan struct{}, 1)
	runCtx, stop := context.WithCancel(context.Background())
	view, err := clusterview.NewView(e.cp.Config, framework.Scheme(), wc)
	e.must(err)
	e.must(view.Start(runCtx, wake))
	ag := &agent.Agent{Client: e.c, View: view, NodeName: e.nodeName, Layout: host, AuthTTL: 5 * time.Minute, Period: 2 * time.Minute,
		Log: t.Logf, Wake: wake, Installer: &install.Installer{Layout: host, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}}
	ran := make(chan struct{})
	go clusterview.Wakeup{Client: wc, NodeName: e.nodeName, Log: t.Logf}.Run(runCtx, wake)
	go func() { defer close(ran); _ = ag.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-ran })
	return host, view
}

// The kill switch needs no operator: with brewlet-operator stopped, the agent itself reads
// spec.revoked, a removed Approved condition and a RuntimeImage being deleted, and revokes the
// node's authorization within seconds (its period is two minutes); undoing the first two
// authorizes again.
func TestAgentRevokesWithoutTheOperator(t *testing.T) {
	e := newAgentEnv(t, "Eager")
	host, _ := startWiredAgent(t, e)
	revoked := func(want bool) func() bool {
		return func() bool {
			a, err := host.ReadAuthorization(kit.PyID)
			return err == nil && a.Revoked == want
		}
	}
	waitFor(t, 60*time.Second, "generation 1 authorized", revoked(false))
	e.op.Stop()

	kit.UpdateRI(t, e.c, kit.PyID, func(ri *brewletv1.RuntimeImage) { ri.Spec.Revoked = true })
	waitFor(t, 30*time.Second, "the authorization revoked after spec.revoked", revoked(true))
	kit.UpdateRI(t, e.c, kit.PyID, func(ri *brewletv1.RuntimeImage) { ri.Spec.Revoked = false })
	waitFor(t, 30*time.Second, "authorized again after spec.revoked is cleared", revoked(false))

	// A status written by someone else than the operator, without Approved.
	var approved metav1.Condition
	updateStatus := func(edit func(*brewletv1.RuntimeImage)) {
		t.Helper()
		ri := &brewletv1.RuntimeImage{}
		e.must(e.c.Get(context.Background(), client.ObjectKey{Name: kit.PyID}, ri))
		edit(ri)
		e.must(e.c.Status().Update(context.Background(), ri))
	}
	updateStatus(func(ri *brewletv1.RuntimeImage) {
		approved = *meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionApproved))
		meta.RemoveStatusCondition(&ri.Status.Conditions, string(vocab.ConditionApproved))
	})
	waitFor(t, 30*time.Second, "the authorization revoked without an Approved condition", revoked(true))
	updateStatus(func(ri *brewletv1.RuntimeImage) { meta.SetStatusCondition(&ri.Status.Conditions, approved) })
	waitFor(t, 30*time.Second, "authorized again with Approved=True", revoked(false))

	// Deleting: the operator's finalizer keeps the object, with a deletion timestamp.
	e.must(e.c.Delete(context.Background(), e.ri))
	waitFor(t, 30*time.Second, "the authorization revoked while the RuntimeImage is deleted", revoked(true))
}
