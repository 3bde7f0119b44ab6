package tasks

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
)

// MaxReportedFailedStarts bounds NodeRuntime status.failedStarts (the CRD's maxItems).
const MaxReportedFailedStarts = 16

// FailedStarts returns the containers the shim recorded as failed starts in the last
// hoststate.FailedStartsKept, newest first, for the node report; only the node's writer
// removes old records. Records the API would refuse (a field past its bound) are left out
// rather than failing the whole report: the shim wrote them from what containerd was told.
func (a Reporter) FailedStarts(now time.Time) []brewletv1.NodeFailedStart {
	prune := a.MayWrite == nil || a.MayWrite() == nil
	recs, err := a.Layout.ReadFailedStarts(now, hoststate.FailedStartsKept, prune)
	if err != nil {
		a.logf("failed starts not read: %v", err)
		return nil
	}
	return reportFailedStarts(recs)
}

// reportFailedStarts converts records (newest first) to report entries, at most
// MaxReportedFailedStarts, dropping those outside the CRD's bounds.
func reportFailedStarts(recs []hoststate.FailedStart) []brewletv1.NodeFailedStart {
	var out []brewletv1.NodeFailedStart
	for _, f := range recs {
		if len(out) == MaxReportedFailedStarts {
			break
		}
		if f.Generation < 1 || f.ExitCode > 1<<31-1 || len(f.PodNamespace) > 253 || len(f.PodName) > 253 ||
			len(f.ContainerName) > 253 || len(f.PodUID) > 128 || len(f.Epoch) > 128 || f.ExitedAt.IsZero() {
			continue
		}
		out = append(out, brewletv1.NodeFailedStart{PodNamespace: f.PodNamespace, PodName: f.PodName,
			PodUID: types.UID(f.PodUID), ContainerName: f.ContainerName, ID: f.ID, Epoch: types.UID(f.Epoch),
			Generation: f.Generation, ExitCode: int32(f.ExitCode), ExitedAt: metav1.NewTime(f.ExitedAt.UTC().Truncate(time.Second))})
	}
	return out
}
