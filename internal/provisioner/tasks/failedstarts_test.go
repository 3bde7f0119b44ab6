package tasks

import (
	"errors"
	"strings"
	"testing"
	"time"

	"brewlet.sh/brewlet/internal/hoststate"
)

// The report carries the shim's records newest first, at most MaxReportedFailedStarts,
// without those the API would refuse; only the node's writer prunes old ones.
func TestFailedStartsReport(t *testing.T) {
	l := hoststate.Under(t.TempDir())
	now := time.Now()
	rec := func(cid string, age time.Duration, mutate func(*hoststate.FailedStart)) {
		f := hoststate.FailedStart{Lease: hoststate.Lease{ContainerID: cid, ID: "python-3.12", Epoch: "e1", Generation: 2, PodNamespace: "shop",
			PodName: "web-" + cid, PodUID: "uid-" + cid, ContainerName: "app", CreatedAt: now.Add(-age - time.Second)}, ExitCode: 1, ExitedAt: now.Add(-age)}
		if mutate != nil {
			mutate(&f)
		}
		if err := l.RecordFailedStart(f); err != nil {
			t.Fatal(err)
		}
	}
	for i := range MaxReportedFailedStarts + 4 {
		rec("c"+string(rune('a'+i)), time.Duration(i)*time.Second, nil)
	}
	rec("long", 0, func(f *hoststate.FailedStart) { f.PodName = strings.Repeat("x", 254) })
	rec("nogen", 0, func(f *hoststate.FailedStart) { f.Generation = 0 })
	rec("old", 20*time.Minute, nil)

	other := Reporter{Layout: l, MayWrite: func() error { return errors.New("another agent writes this node") }}
	got := other.FailedStarts(now)
	if len(got) != MaxReportedFailedStarts || got[0].PodName != "web-ca" || got[1].PodName != "web-cb" {
		t.Fatalf("report %+v; want the %d newest, newest first", got, MaxReportedFailedStarts)
	}
	for _, f := range got {
		if f.PodName == "web-long" || len(f.PodName) > 253 || f.Generation < 1 {
			t.Fatalf("an entry the API would refuse: %+v", f)
		}
	}
	if recs, _ := l.ReadFailedStarts(now, 24*time.Hour, false); len(recs) != MaxReportedFailedStarts+7 {
		t.Fatalf("%d records left; a reader that does not write the node pruned some", len(recs))
	}
	Reporter{Layout: l}.FailedStarts(now)
	if recs, _ := l.ReadFailedStarts(now, 24*time.Hour, false); len(recs) != MaxReportedFailedStarts+6 {
		t.Fatalf("%d records left; the node's writer should have removed the old one", len(recs))
	}
}
