// Package restarts is the rotation restart controller: after a RuntimeImage's rotation has
// reached every node, it restarts the workloads that opted in (annotation
// brewlet.sh/restart-on-rotation: "true" on the Deployment, StatefulSet or DaemonSet) and
// still run containers on an older generation, by setting the pod-template barrier
// annotation brewlet.sh/rotated-to-generation, so the workload's own strategy replaces its
// pods. It never deletes pods or changes strategies. Decisions are pure functions of the
// RuntimeImage, the workloads, their pods and the nodes' reports (this file); the
// reconciler reads, decides, patches and records.
package restarts

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/eventnote"
	"brewlet.sh/brewlet/internal/operator/rollout"
	"brewlet.sh/brewlet/internal/vocab"
)

// Outcomes of a workload restart (status.rotation.restarts[].outcome).
const (
	OutcomePending       = "Pending"       // needs a restart; waits for a slot
	OutcomeInProgress    = "InProgress"    // barrier set; the rollout runs
	OutcomeSucceeded     = "Succeeded"     // the rollout finished on the target
	OutcomeFailed        = "Failed"        // the rollout missed its progress deadline
	OutcomeDeferred      = "Deferred"      // paused, partitioned, or a barrier of another epoch
	OutcomeNotApplicable = "NotApplicable" // OnDelete: pods are replaced only when deleted
)

// MaxRecorded bounds status.rotation.restarts (the CRD's maxItems). When there are more,
// the records that hold or want a slot are kept first, so deadlines are never lost.
const MaxRecorded = 100

// ReasonPatchRefused: the barrier patch was refused (admission, RBAC, a conflict); retried
// after the other waiting workloads.
const ReasonPatchRefused = "PatchRefused"

// protectedNamespaces are never restarted (the chart's admission policy refuses it too).
var protectedNamespaces = map[string]bool{"kube-system": true, "kube-public": true, "kube-node-lease": true}

// Barrier is the value of the pod-template annotation brewlet.sh/rotated-to-generation.
type Barrier = brewletv1.RotationBarrier

// ParseBarrier reads an annotation value; ok is false when it is absent or unreadable
// (anyone can write a pod-template annotation: it is only ever compared, never trusted).
func ParseBarrier(v string) (Barrier, bool) { return brewletv1.ParseRotationBarrier(v) }

// Workload is what the decision needs of a Deployment, StatefulSet or DaemonSet.
type Workload struct {
	Kind, Namespace, Name string
	// Barrier is the pod template's current barrier annotation ("" when none).
	Barrier string
	// NotApplicable: OnDelete (pods are replaced only when someone deletes them).
	NotApplicable bool
	// Deferred: paused (Deployment) or partitioned (StatefulSet), with the reason.
	Deferred string
	// RolledOut: every replica runs the current template and is available.
	RolledOut bool
	// Pods are the workload's pods (by its selector) running this runtime ID.
	Pods []Pod
	// Priority orders restarts, higher first (PriorityOf its annotation).
	Priority int
}

// Restart priorities outside these bounds are not priorities: they count as 0.
const (
	minPriority = -1000
	maxPriority = 1000
)

// PriorityOf reads a workload's brewlet.sh/restart-priority annotation. Anyone who can
// edit the workload can set it, and it only orders that owner's restart among the others:
// a value that is not a small integer counts as the default 0.
func PriorityOf(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < minPriority || n > maxPriority {
		return 0
	}
	return n
}

// Key identifies a workload in status and events.
func (w Workload) Key() string { return w.Kind + "/" + w.Namespace + "/" + w.Name }

// Pod is one pod of a workload.
type Pod struct {
	Name    string
	UID     types.UID
	Node    string // "" while unscheduled
	Created time.Time
	// Barrier is the pod's barrier annotation: the template it was made from.
	Barrier string
	// Failing says how the pod fails ("": it does not, or not yet), from its status:
	// a container crash-looping or exited with an error, or the pod not ready for longer
	// than the readiness grace (health.go).
	Failing string
}

// Policy is the chart's operator.rotationRestarts.
type Policy struct {
	MaxConcurrent    int
	ProgressDeadline time.Duration
	// MaxFailures is how many restarts of one target may fail before no further one
	// starts (0: the first failure halts).
	MaxFailures int
	// Soak is how long after the rotation completed the first restart waits: the new
	// generation serves new pods on every node for a while before old ones are moved.
	Soak time.Duration
	// Window, when set, is the only time restarts start; those in progress when it closes
	// finish.
	Window *Window
}

// ReasonSoaking: the rotation completed less than the soak period ago.
const ReasonSoaking = "Soaking"

// maxNamedFailures bounds the workloads a halt message names.
const maxNamedFailures = 5

// Tasks are what the nodes' reports show for one runtime ID.
type Tasks struct {
	// ByPod: a pod on the node that reported it -> its containers' tasks (other epochs
	// count as older). A node speaks only for its own pods: what node A says about a pod
	// bound to node B is never read, so one node cannot hold back or force restarts of
	// workloads elsewhere.
	ByPod map[PodOnNode][]brewletv1.NodeTask
	// Trusted are the nodes whose report is complete and whose agent is alive: what they
	// do not list does not run there.
	Trusted map[string]bool
	// Unsettled are the nodes that do not serve the target (still installing it, waiting
	// for their wave, or excluded after failing it), with why: a restart would put pods
	// back on the generation they have. Stuck nodes (rollout.PhaseStuck) are not among
	// them: waiting for a node that may never move would hold the workload forever, so
	// its pods are restarted like those of any node (an untrusted report means restart).
	Unsettled map[string]string
}

// PodOnNode names a pod as the node that runs it reports it.
type PodOnNode struct {
	Node string
	UID  types.UID
}

// TasksOf collects the ID's tasks from complete reports of nodes whose agent is alive
// (fresh); a stale or incomplete report proves nothing, so its node's pods count as
// unreported. It also notes the nodes that report the ID in the target's epoch without
// serving the target and without being stuck (silent: the agent is known to have stopped;
// see rollout.PhaseAt).
func TasksOf(t Target, reports []brewletv1.NodeRuntime, fresh, silent func(node string) bool, now time.Time) Tasks {
	out := Tasks{ByPod: map[PodOnNode][]brewletv1.NodeTask{}, Trusted: map[string]bool{}, Unsettled: map[string]string{}}
	rt := rollout.Target{Epoch: t.Epoch, Generation: t.Generation}
	for i := range reports {
		r := &reports[i]
		for j := range r.Status.Runtimes {
			e := &r.Status.Runtimes[j]
			if e.ID != t.ID || e.Epoch != t.Epoch || e.State == string(vocab.StateRevoked) {
				continue
			}
			switch rollout.PhaseAt(rt, rollout.NodeOf(r, e, silent), now) {
			case rollout.PhaseFailed:
				why := e.Reason
				if why == "" {
					why = string(vocab.StateFailed)
				}
				out.Unsettled[r.Name] = fmt.Sprintf("excluded from the rotation (failed generation %d: %s)", t.Generation, why)
			case rollout.PhaseInstalling:
				out.Unsettled[r.Name] = fmt.Sprintf("still installing generation %d", t.Generation)
			case rollout.PhaseWaiting:
				out.Unsettled[r.Name] = fmt.Sprintf("serving generation %d, waiting for its rollout wave", e.Generation)
			}
		}
		if !r.Status.Complete || !fresh(r.Name) {
			continue
		}
		out.Trusted[r.Name] = true
		for _, task := range r.Status.Tasks {
			if task.ID == t.ID {
				k := PodOnNode{Node: r.Name, UID: task.PodUID}
				out.ByPod[k] = append(out.ByPod[k], task)
			}
		}
	}
	return out
}

// unsettled names the first of the workload's nodes that does not serve the target.
func unsettled(w Workload, tasks Tasks) string {
	for _, p := range w.Pods {
		if why, ok := tasks.Unsettled[p.Node]; ok && p.Node != "" {
			return fmt.Sprintf("pod %s runs on node %s, %s: restarting now would not move it; the restart waits until the node serves the target or leaves the pool", p.Name, p.Node, why)
		}
	}
	return ""
}

// needsRestart: the workload was restarted onto the generation a rollback replaces, or one
// of the workload's pods runs an older generation (not the one a rollback serves again) or epoch by a trusted
// report, or sits on a node without a fresh, complete report and was created before the
// rotation completed (a missing or stale report means restart, to be safe). A pod that a
// trusted node does not list runs no container of this runtime (not started yet, or done):
// it starts on the current generation.
func needsRestart(w Workload, t Target, tasks Tasks) bool {
	if b, ok := ParseBarrier(w.Barrier); ok && t.Rollback && b.ID == t.ID && b.Epoch == t.Epoch && b.Generation == t.Bad {
		return true
	}
	for _, p := range w.Pods {
		if p.Node == "" {
			continue // not scheduled: it will start on a current node
		}
		if !tasks.Trusted[p.Node] {
			if p.Created.Before(t.CompletedAt) {
				return true
			}
			continue
		}
		for _, task := range tasks.ByPod[PodOnNode{Node: p.Node, UID: p.UID}] {
			if task.Epoch != t.Epoch || (task.Generation < t.Generation && (!t.Rollback || task.Generation != t.Same)) {
				return true
			}
		}
	}
	return false
}

// Action is what the reconciler does to one workload.
type Action struct {
	Workload Workload
	Record   brewletv1.WorkloadRestart
	// Patch: set the barrier to the target now.
	Patch bool
}

// Decide returns, for every opted-in workload of the RuntimeImage, its restart record and
// whether to patch it now. previous are the records status holds (their startedAt is the
// progress deadline's start); inFlight counts restarts in progress for other RuntimeImages
// (the limit is the operator's, not per runtime). Workloads that need nothing and have no
// record for this target get none.
func Decide(t Target, workloads []Workload, tasks Tasks, previous []brewletv1.WorkloadRestart, inFlight int, p Policy, now time.Time) []Action {
	prev := map[string]brewletv1.WorkloadRestart{}
	for _, r := range previous {
		if r.StartedAt != nil && r.StartedAt.Time.Before(t.CompletedAt) {
			continue // started for an earlier target: its deadline and outcome are not this one's
		}
		prev[r.Kind+"/"+r.Namespace+"/"+r.Name] = r
	}
	slices.SortFunc(workloads, func(a, b Workload) int { return strings.Compare(a.Key(), b.Key()) })
	var actions []Action
	var waiting []int // indexes into actions of restarts that want a slot
	busy := inFlight
	for _, w := range workloads {
		rec := brewletv1.WorkloadRestart{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name}
		old, had := prev[w.Key()]
		b, hasBarrier := ParseBarrier(w.Barrier)
		switch {
		case hasBarrier && b.ID == t.ID && b.Epoch == t.Epoch && b.Generation >= t.Generation:
			// Patched for this target (by us, before a restart of the operator, or by hand):
			// the rollout decides the outcome, never the patch.
			rec.StartedAt = old.StartedAt
			if rec.StartedAt == nil {
				rec.StartedAt = &metav1.Time{Time: now}
			}
			failing := failingPod(w, t)
			switch {
			case w.RolledOut:
				rec.Outcome, rec.Message = OutcomeSucceeded, fmt.Sprintf("every pod runs %s generation %d", t.ID, t.Generation)
			case had && (old.Outcome == OutcomeFailed || old.Outcome == OutcomeSucceeded):
				// Settled: a rollout that finished and later loses a pod's readiness (a node
				// drained, a probe failing) is the workload's own business, and a failure
				// stays reported; neither takes a slot again for this target.
				rec.Outcome, rec.Reason, rec.Message = old.Outcome, old.Reason, old.Message
			case failing != "":
				// A pod of the new template failing is the answer: the deadline is the last resort.
				rec.Outcome, rec.Reason = OutcomeFailed, ReasonPodsFailing
				rec.Message = fmt.Sprintf("%s on %s generation %d; its slot is freed. Check the pod's logs and events", failing, t.ID, t.Generation)
			case now.Sub(rec.StartedAt.Time) > p.ProgressDeadline:
				rec.Outcome, rec.Reason = OutcomeFailed, "ProgressDeadlineExceeded"
				rec.Message = fmt.Sprintf("the rollout did not finish within %s; its slot is freed. Check the workload's pods and events", p.ProgressDeadline)
			default:
				rec.Outcome, rec.Message = OutcomeInProgress, fmt.Sprintf("rolling out to %s generation %d", t.ID, t.Generation)
				busy++
			}
		case !needsRestart(w, t, tasks):
			continue // nothing runs an older generation: nothing to do or report
		case protectedNamespaces[w.Namespace]:
			rec.Outcome, rec.Reason = OutcomeNotApplicable, string(vocab.ReasonRestartNotApplicable)
			rec.Message = fmt.Sprintf("Brewlet never restarts workloads in %s (the admission policy refuses it too); restart it by hand", w.Namespace)
		case hasBarrier && b.ID == t.ID && b.Epoch != t.Epoch:
			rec.Outcome, rec.Reason = OutcomeDeferred, string(vocab.ReasonRestartDeferred)
			rec.Message = fmt.Sprintf("the pod template's %s names epoch %s, not %s: a barrier of another epoch is never overwritten automatically; remove the annotation to let Brewlet restart it", vocab.AnnotationRotatedToGeneration, b.Epoch, t.Epoch)
		case w.NotApplicable:
			rec.Outcome, rec.Reason = OutcomeNotApplicable, string(vocab.ReasonRestartNotApplicable)
			rec.Message = "updateStrategy OnDelete replaces pods only when they are deleted; delete the pods on older generations to move them"
		case w.Deferred != "":
			rec.Outcome, rec.Reason, rec.Message = OutcomeDeferred, string(vocab.ReasonRestartDeferred), w.Deferred
		case unsettled(w, tasks) != "":
			rec.Outcome, rec.Reason, rec.Message = OutcomeDeferred, string(vocab.ReasonRestartDeferred), unsettled(w, tasks)
		case had && old.Outcome == OutcomeInProgress && old.StartedAt != nil && now.Sub(old.StartedAt.Time) <= p.ProgressDeadline:
			// Patched by an earlier pass whose write the workload cache has not shown yet:
			// never patch twice.
			rec = old
			busy++
		default:
			rec.Outcome, rec.Message = OutcomePending, fmt.Sprintf("pods run an older generation of %s; waiting for a restart slot (at most %d at once)", t.ID, p.MaxConcurrent)
			if had && old.Reason == ReasonPatchRefused {
				rec.Reason, rec.Message = old.Reason, old.Message
			}
			waiting = append(waiting, len(actions))
		}
		actions = append(actions, Action{Workload: w, Record: rec})
	}
	// Workloads whose last patch was refused go last: they must not take every slot again
	// and starve the others. Otherwise higher priority first (canaries), then by name.
	slices.SortStableFunc(waiting, func(a, b int) int {
		ra, rb := actions[a].Record.Reason == ReasonPatchRefused, actions[b].Record.Reason == ReasonPatchRefused
		switch {
		case ra != rb && ra:
			return 1
		case ra != rb:
			return -1
		}
		return actions[b].Workload.Priority - actions[a].Workload.Priority
	})
	// Nothing new starts while a hold applies (soak, pause, the health gate); restarts in
	// progress finish, and the waiting records say why they wait.
	if reason, msg := holdOf(actions, t, p, now); reason != "" {
		for _, i := range waiting {
			actions[i].Record.Reason, actions[i].Record.Message = reason, msg
		}
		return actions
	}
	for _, i := range waiting {
		if busy >= p.MaxConcurrent {
			break
		}
		busy++
		a := &actions[i]
		a.Patch = true
		a.Record.Outcome, a.Record.Reason = OutcomeInProgress, ""
		a.Record.Message = fmt.Sprintf("restarting to move pods to %s generation %d", t.ID, t.Generation)
		a.Record.StartedAt = &metav1.Time{Time: now}
	}
	return actions
}

// holdOf is why no restart may start now ("" when they may): the soak period after the
// rotation completed, spec.paused or the fleet pause, the health gate (HaltOf), or the
// restart window.
func holdOf(actions []Action, t Target, p Policy, now time.Time) (reason, msg string) {
	if soakEnd := t.CompletedAt.Add(p.Soak); now.Before(soakEnd) && !t.Rollback {
		return ReasonSoaking, fmt.Sprintf("the rotation completed at %s; restarts start after the soak period of %s, at %s",
			t.CompletedAt.UTC().Format(time.RFC3339), p.Soak, soakEnd.UTC().Format(time.RFC3339))
	}
	if t.Pause != "" {
		return string(vocab.ReasonRotationPaused), t.Pause
	}
	if h := HaltOf(actions, t, p); h != nil {
		// The new generation hurt too many workloads.
		return string(vocab.ReasonRestartsHalted), h.Message
	}
	if p.Window != nil && !t.Rollback {
		if open, opens := p.Window.At(now); !open {
			when := "never again (the schedule does not fire any more)"
			if !opens.IsZero() {
				when = fmt.Sprintf("at %s (%s)", opens.In(p.Window.Location).Format(time.RFC3339), opens.UTC().Format(time.RFC3339))
			}
			return string(vocab.ReasonOutsideRestartWindow), fmt.Sprintf("restarts start only in the restart window %s; it opens next %s", p.Window, when)
		}
	}
	return "", ""
}

// HaltOf is the restart halt of the target when more of the actions' restarts failed than
// p.MaxFailures (nil: restarts go on).
func HaltOf(actions []Action, t Target, p Policy) *brewletv1.RestartsHalt {
	var failed []string
	for _, a := range actions {
		if a.Record.Outcome == OutcomeFailed {
			failed = append(failed, a.Workload.Key())
		}
	}
	if len(failed) <= p.MaxFailures {
		if t.FailedStarts == "" {
			return nil
		}
		// Restarting more workloads onto a generation whose new containers fail would
		// fail them too.
		msg := fmt.Sprintf("new containers fail to start on %s generation %d: no further restart starts; those in progress finish. %s",
			t.ID, t.Generation, t.FailedStarts)
		return &brewletv1.RestartsHalt{Failed: int32(len(failed)), MaxFailures: int32(p.MaxFailures), Message: eventnote.Cut(msg, maxHaltMessage)}
	}
	named := failed[:min(len(failed), maxNamedFailures)]
	msg := fmt.Sprintf("%d restarted workload(s) failed on %s generation %d, more than the restart failure budget %d: no further restart starts; those in progress finish. Failed: %s",
		len(failed), t.ID, t.Generation, p.MaxFailures, strings.Join(named, ", "))
	if len(failed) > len(named) {
		msg += fmt.Sprintf(" and %d more", len(failed)-len(named))
	}
	msg += ". Fix the runtime image and set a new digest (or the previous one, to roll back): a new generation starts restarts afresh"
	return &brewletv1.RestartsHalt{Failed: int32(len(failed)), MaxFailures: int32(p.MaxFailures), Message: eventnote.Cut(msg, maxHaltMessage)}
}

// maxHaltMessage is the CRD's bound on status.rotation.restartsHalted.message.
const maxHaltMessage = 1024

// recordRank orders records when there are more than MaxRecorded: those holding a slot
// (never more than the concurrency limit), then failures and successes (settled outcomes
// that later passes read back: a dropped one could take a slot again), then the waiting,
// then deferred and not applicable ones (decided afresh every pass).
var recordRank = map[string]int{OutcomeInProgress: 0, OutcomeFailed: 1, OutcomeSucceeded: 2, OutcomePending: 3}

// Records are the actions' records, bounded by MaxRecorded (recordRank; by workload within
// each rank), and the exact counts of all of them.
func Records(actions []Action) ([]brewletv1.WorkloadRestart, *brewletv1.RestartCounts) {
	out := make([]brewletv1.WorkloadRestart, 0, len(actions))
	var c brewletv1.RestartCounts
	for _, a := range actions {
		out = append(out, a.Record)
		switch a.Record.Outcome {
		case OutcomePending:
			c.Pending++
		case OutcomeInProgress:
			c.InProgress++
		case OutcomeSucceeded:
			c.Succeeded++
		case OutcomeFailed:
			c.Failed++
		case OutcomeDeferred:
			c.Deferred++
		case OutcomeNotApplicable:
			c.NotApplicable++
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	if len(out) > MaxRecorded {
		rank := func(o string) int {
			if r, ok := recordRank[o]; ok {
				return r
			}
			return len(recordRank)
		}
		slices.SortStableFunc(out, func(a, b brewletv1.WorkloadRestart) int { return rank(a.Outcome) - rank(b.Outcome) })
		out = out[:MaxRecorded]
	}
	return out, &c
}

// InProgress counts records that hold a slot.
func InProgress(records []brewletv1.WorkloadRestart) int {
	n := 0
	for _, r := range records {
		if r.Outcome == OutcomeInProgress {
			n++
		}
	}
	return n
}
