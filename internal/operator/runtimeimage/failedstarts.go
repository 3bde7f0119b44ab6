package runtimeimage

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator/eventnote"
)

// HealthWindow is how long after a rotation reached every node a container failing to
// start on its target still counts against it. Past it the target is proven as far as
// failed starts go: a failure then is a workload's own (a new Deployment broken
// everywhere), and rolling a runtime back for it would undo a patch for every workload.
const HealthWindow = 30 * time.Minute

// clockSkew is how far before the target's assignment a node's clock may put a failure on it.
const clockSkew = time.Minute

// maxFailedStartsMessage is the CRD's bound on status.rotation.failedStarts.message.
const maxFailedStartsMessage = 1024

// maxNamedFailedStarts bounds the containers named in the message.
const maxNamedFailedStarts = 5

// failedStartsOf sums what the nodes report of containers that failed to start on the
// rotation's target (rot, for st's current generation), or nil when failed starts do not
// judge it: the first generation of an epoch (nothing to compare with or go back to) and a
// rollback generation (it serves bytes that ran before). A failure counts when:
//   - its container leased the target (ID, epoch and generation);
//   - it exited between the target's assignment and HealthWindow after the rotation
//     completed;
//   - the same pod's container did not also fail on an older generation in the node's
//     report: a pod that crashed before the rotation says nothing about the new bytes.
//
// Nodes count once each, whatever they report: a node can fail the target for itself, not
// for the fleet; more nodes than maxFailures exceed the budget. Once exceeded, the sum is
// kept for the target (prev) as it was: records age out of the nodes' reports, and a halt
// or rollback must not flap back.
func failedStartsOf(ri *brewletv1.RuntimeImage, st *brewletv1.RuntimeImageStatus, rot *brewletv1.RotationStatus, reports []brewletv1.NodeRuntime, maxFailures int, now metav1.Time) *brewletv1.FailedStarts {
	p := st.Previous
	if p == nil || p.Generation < 1 || p.Generation >= st.Generation || st.RollbackInEffect() != nil {
		return nil
	}
	if prev := rot.FailedStarts; prev != nil && prev.Exceeded {
		return prev
	}
	from := rot.Target.AssignedAt.Add(-clockSkew)
	until := now.Add(time.Minute)
	if c := rot.RotationCompletedAt; c != nil {
		until = c.Add(HealthWindow)
	}
	type key struct {
		pod       types.UID
		container string
	}
	var sum brewletv1.FailedStarts
	var named []string
	pods := map[types.UID]bool{}
	for i := range reports {
		fs := reports[i].Status.FailedStarts
		before := map[key]bool{}
		for _, f := range fs {
			if f.ID == ri.Name && f.Epoch == ri.UID && f.Generation < st.Generation {
				before[key{f.PodUID, f.ContainerName}] = true
			}
		}
		counted := false
		for _, f := range fs {
			if f.ID != ri.Name || f.Epoch != ri.UID || f.Generation != st.Generation || before[key{f.PodUID, f.ContainerName}] ||
				f.ExitedAt.Before(&metav1.Time{Time: from}) || f.ExitedAt.After(until) {
				continue
			}
			if !counted {
				counted = true
				sum.Nodes++
			}
			if !pods[f.PodUID] {
				pods[f.PodUID] = true
				sum.Pods++
				named = append(named, fmt.Sprintf("%s/%s container %s on %s (exit code %d)", f.PodNamespace, f.PodName, f.ContainerName, reports[i].Name, f.ExitCode))
			}
		}
	}
	if sum.Nodes == 0 {
		return nil
	}
	slices.Sort(named)
	sum.MaxFailures = int32(max(0, maxFailures))
	sum.Exceeded = int(sum.Nodes) > maxFailures
	msg := fmt.Sprintf("%d pod(s) on %d node(s) had a container exit with an error within a minute of starting on generation %d (%s) that had not failed on an earlier one",
		sum.Pods, sum.Nodes, st.Generation, st.Digest)
	if sum.Exceeded {
		msg += fmt.Sprintf(", more nodes than rollout.maxFailures=%d", maxFailures)
	} else {
		msg += fmt.Sprintf(", within rollout.maxFailures=%d nodes", maxFailures)
	}
	msg += ": " + strings.Join(named[:min(len(named), maxNamedFailedStarts)], ", ")
	if len(named) > maxNamedFailedStarts {
		msg += fmt.Sprintf(" and %d more", len(named)-maxNamedFailedStarts)
	}
	sum.Message = eventnote.Cut(msg, maxFailedStartsMessage)
	return &sum
}
