package agent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// maxHostBackoff caps the pause between attempts of a failing host change.
const maxHostBackoff = 10 * time.Minute

// shimUsers is implemented by task sources that can count containerd's containers on the
// Brewlet shim, pod sandboxes included (ContainerdTasks).
type shimUsers interface {
	ShimContainers(ctx context.Context) (int, error)
}

// hostState is the agent's progress on host changes: prepared in this process, and the
// backoff of a failing prepare or cleanup.
type hostState struct {
	prepared bool
	fails    int
	next     time.Time
}

func (h *hostState) failed(period time.Duration) {
	h.fails++
	d := period << min(h.fails, 10)
	h.next = time.Now().Add(min(d, maxHostBackoff))
}

func (h *hostState) succeeded() { h.fails, h.next = 0, time.Time{} }

// prepareHost makes the node's host changes once a profile selects the node: the shim and,
// in containerd mode validated, the handler. The mode is the one brewlet-operator wrote
// into the NodeRuntime spec (from the profile), else the agent's flag. A failure (containerd
// rolled back) is reported and retried with backoff.
func (a *Agent) prepareHost(ctx context.Context, nrt *brewletv1.NodeRuntime) error {
	if a.HostSetup == nil || a.host.prepared || time.Now().Before(a.host.next) {
		return nil
	}
	if err := a.mayWrite(); err != nil {
		return err
	}
	rep := a.HostSetup.Prepare(ctx, ModeOf(nrt.Spec, a.ContainerdMode))
	a.Host = rep
	if rep.Message != "" {
		a.host.failed(a.Period)
		return nil
	}
	a.host.prepared = true
	a.host.succeeded()
	return nil
}

// cleanupHost runs on passes where no profile selects the node: once no container uses
// Brewlet (no lease, no container on the shim, sandboxes included) and no runtime is left
// on disk (the collector removes revoked ones once unused), it reverses the host changes.
// Until then, and after a failed attempt (retried with backoff), it says what is owed.
func (a *Agent) cleanupHost(ctx context.Context) error {
	if a.HostSetup == nil {
		return nil
	}
	owed, err := a.HostSetup.Recorded()
	if err != nil {
		a.Host = &brewletv1.NodeCleanup{Message: "cleanup: " + err.Error()}
		return nil
	}
	wait := a.cleanupWaitsFor(ctx)
	notes := ""
	if owed {
		if wait != "" {
			a.setCleanupMessage("cleanup waits for " + wait)
			return nil
		}
		if time.Now().Before(a.host.next) {
			return nil
		}
		if err := a.mayWrite(); err != nil {
			return err
		}
		notes, err = a.HostSetup.Reverse(ctx)
		if err != nil {
			a.host.failed(a.Period)
			a.setCleanupMessage(fmt.Sprintf("cleanup failed (retried in %s): %v", time.Until(a.host.next).Round(time.Second), err))
			a.logf("host cleanup: %v", err)
			return nil
		}
		a.host.succeeded()
		a.logf("host cleanup done: containerd's config and the shim are as before Brewlet%s", suffixNote(notes))
	}
	a.host.prepared = false
	a.Host = &brewletv1.NodeCleanup{Message: notes}
	if wait != "" {
		a.setCleanupMessage(strings.TrimPrefix(notes+"; ", "; ") + "cleanup waits for " + wait)
		return nil
	}
	if a.holdsState() {
		// Nothing of Brewlet's is in use or installed: its own directories go too, so the
		// node is as it was before Brewlet.
		if err := a.mayWrite(); err != nil {
			return err
		}
		if err := a.Layout.RemoveState(); err != nil {
			a.setCleanupMessage("cleanup: remove Brewlet's state: " + err.Error())
			return nil
		}
		a.states = map[string]brewletv1.NodeRuntimeEntry{}
		a.logf("no profile selects this node and nothing uses Brewlet: its state under %s and %s is removed", a.Layout.Runtimes, a.Layout.State)
	}
	if a.Layout.HasFenceFiles() {
		// The startup fence guards nothing on a node that serves no runtime; it is opened
		// again (after revocations are written) once a profile selects the node.
		if err := a.mayWrite(); err != nil {
			return err
		}
		if err := a.Layout.RemoveFence(); err != nil {
			a.setCleanupMessage("cleanup: remove the startup fence: " + err.Error())
			return nil
		}
		a.fenceOpen = false
	}
	if a.Layout.HasFailedStarts() {
		// The shim's failed-start records say nothing once no runtime is served here.
		if err := a.mayWrite(); err != nil {
			return err
		}
		if err := a.Layout.RemoveFailedStarts(); err != nil {
			a.setCleanupMessage("cleanup: remove the failed-start records: " + err.Error())
			return nil
		}
	}
	return nil
}

// collectable reports whether a sweep has anything to look at: a node with no runtime
// and no layer is left untouched (a sweep takes the layer cache's lock file).
func (a *Agent) collectable() bool {
	ids, err := a.Layout.RuntimeIDs()
	if err != nil || len(ids) > 0 {
		return true
	}
	ents, err := os.ReadDir(a.Layout.LayerDir(""))
	return err == nil && len(ents) > 0 || err != nil && !os.IsNotExist(err)
}

// holdsState reports whether anything is left under the runtimes or state roots.
func (a *Agent) holdsState() bool {
	for _, root := range []string{a.Layout.Runtimes, a.Layout.State} {
		if ents, err := os.ReadDir(root); err == nil && len(ents) > 0 {
			return true
		}
	}
	return false
}

// ModeOf is the containerd registration mode for the node: the one brewlet-operator wrote
// into its NodeRuntime spec (copied from the profile), else flag.
func ModeOf(spec brewletv1.NodeRuntimeSpec, flag vocab.ContainerdRestart) vocab.ContainerdRestart {
	switch m := vocab.ContainerdRestart(spec.ContainerdRestart); m {
	case vocab.ContainerdRestartValidated, vocab.ContainerdRestartNone:
		return m
	}
	return flag
}

func suffixNote(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func (a *Agent) setCleanupMessage(msg string) {
	rep := &brewletv1.NodeCleanup{}
	if a.Host != nil {
		rep = a.Host.DeepCopy()
	}
	rep.Message = msg
	a.Host = rep
}

// cleanupWaitsFor names what still uses Brewlet on the node ("" when nothing does, as far as
// the agent can prove: any doubt waits).
func (a *Agent) cleanupWaitsFor(ctx context.Context) string {
	var why []string
	if ids, err := a.installedRuntimes(); err != nil {
		return "the runtimes on disk to be listed: " + err.Error()
	} else if len(ids) > 0 {
		why = append(why, "runtimes "+strings.Join(ids, ", ")+" to be removed once unused")
	}
	if leases, err := a.Layout.Leases(); err != nil {
		return "the container leases to be read: " + err.Error()
	} else if len(leases) > 0 {
		why = append(why, fmt.Sprintf("%d container(s) on Brewlet runtimes to end", len(leases)))
	}
	if su, ok := a.Tasks.(shimUsers); ok {
		if n, err := su.ShimContainers(ctx); err != nil {
			return "containerd to list the containers on the Brewlet shim: " + err.Error()
		} else if n > 0 {
			why = append(why, fmt.Sprintf("%d container(s) or pod sandbox(es) on the Brewlet shim to be removed", n))
		}
	} else if a.Tasks == nil {
		why = append(why, "containerd to be asked which containers use the Brewlet shim (no task source)")
	}
	return strings.Join(why, "; ")
}

// installedRuntimes are the IDs with at least one generation on disk.
func (a *Agent) installedRuntimes() ([]string, error) {
	ids, err := a.Layout.RuntimeIDs()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range ids {
		gens, err := a.Layout.Generations(id)
		if err != nil {
			return nil, err
		}
		if len(gens) > 0 {
			out = append(out, id)
		}
	}
	return out, nil
}

// cleanupReport is NodeRuntime status.cleanup: the host changes in place, the runtimes on
// disk, and done once a node no profile selects holds nothing of Brewlet's (with a
// HostSetup: no host change and no state left at all).
func (a *Agent) cleanupReport(selected bool) *brewletv1.NodeCleanup {
	rep := &brewletv1.NodeCleanup{}
	if a.Host != nil {
		rep = a.Host.DeepCopy()
	}
	ids, err := a.installedRuntimes()
	if err != nil {
		rep.Message = strings.TrimPrefix(rep.Message+"; ", "; ") + "runtimes on disk unreadable: " + err.Error()
		return rep
	}
	rep.InstalledRuntimes = ids
	owed := rep.ShimInstalled || rep.ContainerdHandlerRegistered
	if a.HostSetup != nil {
		// Done means nothing of Brewlet's is left: host changes reversed and its own state
		// (layers, markers, records) removed, which happens only once nothing uses it.
		recorded, rerr := a.HostSetup.Recorded()
		owed = recorded || rerr != nil || a.holdsState()
	}
	rep.Done = !selected && len(ids) == 0 && !owed
	return rep
}
