package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/clusterview"
	"brewlet.sh/brewlet/internal/provisioner/gc"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/provisioner/metrics"
	"brewlet.sh/brewlet/internal/provisioner/tasks"
	"brewlet.sh/brewlet/internal/provisioner/writer"
	"brewlet.sh/brewlet/internal/vocab"
)

// Agent is the provisioner's loop for one node. Every pass reads the cluster as the API
// server has it now (quorum reads, or informers a quorum read confirmed), renews or
// revokes authorizations, starts the installs the node's profile asks for (each in its own
// worker: a pass never waits for a registry), and publishes labels and the NodeRuntime
// status when they change. What the node holds is read from disk each pass, never from
// the memory of an earlier process.
type Agent struct {
	Client client.Client // uncached: reads are quorum reads
	// View, when set, supplies the NodeProfiles and RuntimeImages from informers confirmed
	// by a metadata-only quorum read each pass (nil: full quorum lists every pass).
	View      *clusterview.View
	NodeName  string
	PodUID    types.UID // this agent's pod, reported as agentPodUID (empty outside a pod)
	Layout    hoststate.Layout
	Installer *install.Installer
	// AuthTTL is how long an authorization stays valid without a fresh confirmation; at most
	// MaxAuthTTL.
	AuthTTL time.Duration
	// Period is the pause between passes; renewals need several passes per AuthTTL.
	Period time.Duration
	// IsWriter reports whether this agent holds the node's writer lease (nil: always). It is
	// checked before every host change.
	IsWriter func() bool
	// Collector, when set, removes unused generations and layers after each pass.
	Collector *gc.Collector
	// Metrics, when set, counts installs and garbage collection passes.
	Metrics *metrics.Metrics
	// Tasks answers which containers containerd still runs, to reconcile the shim's leases
	// against (nil: nobody to ask, so the report is never complete and no lease is released).
	Tasks tasks.Source
	// TaskGrace is how old a lease must be before its missing task makes it stale (0:
	// tasks.DefaultGrace).
	TaskGrace time.Duration
	// Wake, when set, ends the pause between passes early (see Wakeup).
	Wake <-chan struct{}
	// HostSetup makes and reverses the host changes (shim, containerd handler): made when a
	// profile first selects the node, reversed once none does and nothing uses Brewlet
	// (nil: the host is prepared by someone else, and Host says how).
	HostSetup HostSetup
	// ContainerdMode is the registration mode when the NodeRuntime spec names none.
	ContainerdMode vocab.ContainerdRestart
	// Host is what was done to the node (shim, containerd handler), for the report.
	Host *brewletv1.NodeCleanup
	Log  func(format string, args ...any)
	// StartupTaints are the taint keys a node joining a pool registers with (autoscaler
	// templates): removed once the node can start Brewlet containers (StartupTaintsDue).
	StartupTaints []string

	host hostState
	// released is the UID of the node whose startup taints are known gone: nothing adds
	// them to a registered node again, so the full Node is read only until then.
	released types.UID
	// selected: a profile selected the node in the last pass.
	selected bool

	fenceOpen bool
	states    map[string]brewletv1.NodeRuntimeEntry
	jobs      *jobs
	// handled are the OnDemand requests the last pass acted on: only a new one wakes Run.
	handled map[string]bool
}

func (a *Agent) logf(format string, args ...any) {
	if a.Log != nil {
		a.Log(format, args...)
	}
}

func (a *Agent) init() {
	if a.states == nil {
		a.states = map[string]brewletv1.NodeRuntimeEntry{}
	}
	if a.jobs == nil {
		a.jobs = newJobs()
	}
	if a.Installer != nil && a.Installer.MayWrite == nil {
		// The lease is checked again just before metadata and current are written.
		a.Installer.MayWrite = a.mayWrite
	}
}

// mayWrite is checked before each host change: a lease lost mid-pass stops the pass
// before its next write, not at the start of the next one.
func (a *Agent) mayWrite() error {
	if a.IsWriter != nil && !a.IsWriter() {
		return writer.ErrNotWriter
	}
	return nil
}

// Run closes the startup fence, then reconciles every Period until ctx ends. The fence opens
// after the first pass that confirmed on-disk state against the cluster. Run returns only
// after every install it started has stopped, so a caller that waits for it (the writer
// lease) knows this agent no longer writes.
func (a *Agent) Run(ctx context.Context) error {
	if err := ValidateTiming(a.AuthTTL, a.Period); err != nil {
		return err
	}
	if a.Period <= 0 {
		a.Period = a.AuthTTL / 5
	}
	a.init()
	defer a.Close()
	if err := a.mayWrite(); err != nil {
		return err
	}
	if err := a.Layout.CloseFence(); err != nil {
		return err
	}
	a.fenceOpen = false
	for {
		if err := a.Reconcile(ctx); err != nil {
			a.logf("reconcile: %v", err)
		}
		// Sleep a period, but wake at once when an install finished (its result is
		// authorized without waiting a period), a container asked for an OnDemand install,
		// or the node's directives or a runtime's approval changed (Wake).
		timer := time.NewTimer(a.Period)
		for wait := true; wait; {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-timer.C:
				wait = false
			case <-a.jobs.finished:
				wait = false
			case <-a.Wake:
				wait = false
			case <-time.After(250 * time.Millisecond):
				wait = !a.newRequest()
			}
		}
		timer.Stop()
	}
}

// HostSetup makes and reverses the node's host changes (containerd.HostChanges).
type HostSetup interface {
	Prepare(ctx context.Context, mode vocab.ContainerdRestart) *brewletv1.NodeCleanup
	Reverse(ctx context.Context) (notes string, err error)
	Recorded() (bool, error)
}

// cluster is how the pass reads and publishes (a value: the fields it is made of may be
// set at any time before a pass).
func (a *Agent) cluster() clusterview.Cluster {
	return clusterview.Cluster{Client: a.Client, View: a.View, NodeName: a.NodeName}
}

// Close cancels the installs this agent started and waits for them.
func (a *Agent) Close() {
	if a.jobs != nil {
		a.jobs.stopAll()
	}
}

// ReconcileAndWait runs passes until no install is running or being started: a pass,
// waiting for the installs it started, and a pass that authorizes (or reports) their
// outcome. For tests and one-shot tools; the agent itself never waits on an install.
func (a *Agent) ReconcileAndWait(ctx context.Context) error {
	a.init()
	var err error
	for range 5 {
		started := a.jobs.startedCount()
		// An install that started and already ended in this pass still needs the next pass.
		if err = a.Reconcile(ctx); err != nil || (a.jobs.startedCount() == started && !a.jobs.busy()) {
			return err
		}
		a.jobs.wait()
	}
	return err
}

// newRequest reports a request for an OnDemand install that no pass has acted on yet.
func (a *Agent) newRequest() bool {
	for _, id := range a.Layout.Requests() {
		if !a.handled[id] {
			return true
		}
	}
	return false
}

// Reconcile runs one pass. It never waits for an install: installs run in their own
// workers and a later pass authorizes what they installed.
func (a *Agent) Reconcile(ctx context.Context) error {
	if err := a.mayWrite(); err != nil {
		return err
	}
	a.init()
	// Requests are seen before the targets are decided: only these may be cleared as stale,
	// and none of them wakes Run again, even if this pass fails (no spinning on a request
	// while the API server is away).
	requests := a.Layout.Requests()
	a.handled = map[string]bool{}
	for _, id := range requests {
		a.handled[id] = true
	}
	// Every read below is a quorum read (or confirmed by one): authorizations renewed from
	// them count from the moment the first began.
	confirmed := time.Now()
	cluster := a.cluster()
	node, err := cluster.Node(ctx)
	if err != nil {
		return err
	}
	profileList, imageList, err := cluster.Directives(ctx)
	if err != nil {
		return err
	}
	nrt, err := cluster.NodeRuntime(ctx, node)
	if err != nil {
		return err
	}
	profile, perr := SelectProfile(node, profileList)
	a.selected = profile != nil
	images := map[string]*brewletv1.RuntimeImage{}
	for i := range imageList {
		images[imageList[i].Name] = &imageList[i]
	}
	if perr != nil {
		// A pool conflict: the oldest profile keeps the node (the operator refuses the newer
		// one with the same rule), so serving nodes are never revoked by a new profile.
		a.logf("%v", perr)
	}
	held, err := a.heldIDs()
	if err != nil {
		return fmt.Errorf("list the runtimes on this node (the startup fence stays closed): %w", err)
	}
	states := map[string]brewletv1.NodeRuntimeEntry{}
	acted := map[string]bool{}
	var revokeErr error
	for _, t := range Targets(profile, images, nrt.Spec, held) {
		e, report, err := a.apply(ctx, t, confirmed, acted)
		if err != nil {
			if errors.Is(err, writer.ErrNotWriter) {
				return err
			}
			revokeErr = errors.Join(revokeErr, err)
		}
		if report {
			states[t.ID] = e
		}
	}
	a.states = states
	if err := a.clearStaleRequests(requests, acted); err != nil {
		return err
	}
	if revokeErr != nil {
		// An ID this node must not serve may still be authorized: no container starts.
		return fmt.Errorf("revocation not written (the startup fence stays closed): %w", revokeErr)
	}
	if profile != nil {
		if err := a.prepareHost(ctx, nrt); err != nil {
			return err
		}
	}
	// A node no profile selects and that holds nothing of Brewlet's has no fence to open
	// (cleanupHost removed it): nothing may start there, and nothing of Brewlet's stays.
	if !a.fenceOpen && (profile != nil || a.holdsState()) {
		if err := a.mayWrite(); err != nil {
			return err
		}
		if err := a.Layout.OpenFence(); err != nil {
			return err
		}
		a.fenceOpen = true
	}
	if err := a.publishLabels(ctx, node); err != nil {
		return err
	}
	if err := a.publishStatus(ctx, node, nrt); err != nil {
		return err
	}
	if profile != nil {
		if err := a.releaseNode(ctx, node); err != nil {
			return err
		}
	}
	if a.Collector != nil && a.collectable() {
		c := a.Collector
		if profile == nil {
			// No profile selects the node: nothing will reuse its runtimes, so unused ones
			// go without waiting for the grace (cleanup and uninstall wait for this).
			now := *a.Collector
			now.Grace = 0
			c = &now
		}
		got, err := c.Sweep(ctx, a.IsWriter)
		a.Metrics.ObserveSweep(len(got.Generations), len(got.Layers), err)
		if err != nil {
			a.logf("garbage collection: %v", err)
		} else if len(got.Generations)+len(got.Layers) > 0 {
			a.logf("garbage collection removed generations %v and %d layers", got.Generations, len(got.Layers))
		}
	}
	if profile == nil {
		// No profile selects the node (it left its pool, or its profile is going): once
		// nothing uses Brewlet, put the host back as it was, and say so.
		if err := a.cleanupHost(ctx); err != nil {
			return err
		}
		if err := a.publishStatus(ctx, node, nrt); err != nil {
			return err
		}
		// The label goes in the same pass, right after the report: an uninstall deletes
		// the DaemonSet once the hook saw it gone (the report first: on a node that left
		// the pools, removing the label lets the DaemonSet take the agent away).
		return a.publishLabels(ctx, node)
	}
	return nil
}

// heldIDs are the runtime IDs with state on this node's disk, plus those the last pass
// reported. Read from disk, so an agent that restarted still revokes an ID the cluster
// dropped while it was away, before its first pass opens the fence.
func (a *Agent) heldIDs() ([]string, error) {
	ids, err := a.Layout.RuntimeIDs()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	for id := range a.states {
		if !seen[id] {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// clearStaleRequests removes the OnDemand requests seen at the start of the pass that no
// install answers (the ID is not offered on demand, already installed, or its install
// failed): left in place, each would wake the loop again at once, forever.
func (a *Agent) clearStaleRequests(seen []string, acted map[string]bool) error {
	for _, id := range seen {
		if acted[id] || a.jobs.isRunning(id) {
			continue
		}
		if err := a.mayWrite(); err != nil {
			return err
		}
		a.Layout.ClearRequest(id)
	}
	return nil
}

// publishLabels sets the node's Brewlet labels from this pass's states.
func (a *Agent) publishLabels(ctx context.Context, node *corev1.Node) error {
	states := map[string]vocab.RuntimeState{}
	for id, e := range a.states {
		states[id] = vocab.RuntimeState(e.State)
	}
	want := Labels(states)
	if a.HostSetup != nil {
		// Keeps the agent scheduled here until its host changes are reversed; an
		// unreadable record counts as changes (they may exist).
		if owed, err := a.HostSetup.Recorded(); owed || err != nil {
			want[vocab.LabelHostChanges] = vocab.LabelValuePresent
		}
	}
	return a.cluster().PublishLabels(ctx, node, want)
}

// releaseNode removes the node's startup taints once this pass's labels say it can start
// Brewlet containers: the labels are published first, so a pod the scheduler places here
// the moment the taint goes finds its runtime authorized.
func (a *Agent) releaseNode(ctx context.Context, node *corev1.Node) error {
	if len(a.StartupTaints) == 0 || a.released == node.UID {
		return nil
	}
	states := map[string]vocab.RuntimeState{}
	for id, e := range a.states {
		states[id] = vocab.RuntimeState(e.State)
	}
	if !StartupTaintsDue(states) {
		return nil
	}
	if err := a.mayWrite(); err != nil {
		return err
	}
	removed, err := a.cluster().RemoveStartupTaints(ctx, a.StartupTaints)
	if err != nil {
		return err
	}
	if len(removed) > 0 {
		a.logf("node %s can start Brewlet containers: removed its startup taints %v", node.Name, removed)
	}
	a.released = node.UID
	return nil
}

// publishStatus writes the NodeRuntime status when it changed (not on every pass).
func (a *Agent) publishStatus(ctx context.Context, node *corev1.Node, nrt *brewletv1.NodeRuntime) error {
	st := brewletv1.NodeRuntimeStatus{NodeUID: node.UID, AgentPodUID: a.PodUID, Cleanup: a.cleanupReport(a.selected)}
	for _, e := range a.states {
		st.Runtimes = append(st.Runtimes, e)
	}
	sort.Slice(st.Runtimes, func(i, j int) bool { return st.Runtimes[i].ID < st.Runtimes[j].ID })
	// Complete only when every lease was read and containerd said which of them still run.
	rep := tasks.Reporter{Source: a.Tasks, Layout: a.Layout, Grace: a.TaskGrace, MayWrite: a.mayWrite, Log: a.Log}
	st.Tasks, st.Complete = rep.Report(ctx)
	st.FailedStarts = rep.FailedStarts(time.Now())
	sort.SliceStable(st.Tasks, func(i, j int) bool {
		return st.Tasks[i].PodUID+types.UID(st.Tasks[i].ContainerName) < st.Tasks[j].PodUID+types.UID(st.Tasks[j].ContainerName)
	})
	return a.cluster().PublishStatus(ctx, nrt, st)
}
