package tasks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"brewlet.sh/brewlet/internal/hoststate"
)

func TestDecideTasks(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	grace := 2 * time.Minute
	lease := func(cid string, age time.Duration) hoststate.Lease {
		return hoststate.Lease{ContainerID: cid, ID: "python-3.12", Epoch: "e1", Generation: 1, CreatedAt: now.Add(-age)}
	}
	old, young := lease("old", time.Hour), lease("young", 10*time.Second)
	future := lease("future", -time.Hour)
	zero := hoststate.Lease{ContainerID: "zero", ID: "python-3.12"}
	ids := func(ls []hoststate.Lease) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.ContainerID)
		}
		return out
	}
	for _, tc := range []struct {
		name            string
		leases          []hoststate.Lease
		leasesErr       error
		view            *taskView
		report, release []string
		complete        bool
	}{
		{name: "no leases, containerd answered", view: &taskView{}, complete: true},
		{name: "live task reported", leases: []hoststate.Lease{old},
			view: &taskView{tasks: map[string]State{"old": Live}}, report: []string{"old"}, complete: true},
		{name: "old lease without a task is released", leases: []hoststate.Lease{old},
			view: &taskView{tasks: map[string]State{"old": Absent}}, release: []string{"old"}, complete: true},
		{name: "a lease containerd did not mention counts as absent", leases: []hoststate.Lease{old},
			view: &taskView{tasks: map[string]State{}}, release: []string{"old"}, complete: true},
		{name: "young lease without a task is a container being created", leases: []hoststate.Lease{young},
			view: &taskView{tasks: map[string]State{"young": Absent}}, report: []string{"young"}, complete: true},
		{name: "a lease from the future is young", leases: []hoststate.Lease{future},
			view: &taskView{tasks: map[string]State{}}, report: []string{"future"}, complete: true},
		{name: "a lease without a creation time is old", leases: []hoststate.Lease{zero},
			view: &taskView{tasks: map[string]State{}}, release: []string{"zero"}, complete: true},
		{name: "stopped task: neither running nor released (its shim releases at delete)", leases: []hoststate.Lease{old, young},
			view: &taskView{tasks: map[string]State{"old": Stopped, "young": Stopped}}, complete: true},
		{name: "unknown task state: reported, kept, incomplete", leases: []hoststate.Lease{old},
			view: &taskView{tasks: map[string]State{"old": Unknown}}, report: []string{"old"}},
		{name: "containerd unreachable: every lease reported as it is, none released, incomplete",
			leases: []hoststate.Lease{old, young, zero}, report: []string{"old", "young", "zero"}},
		{name: "an unreadable lease: the readable ones are still decided, incomplete", leases: []hoststate.Lease{old, young},
			leasesErr: errors.New("unreadable lease"), view: &taskView{tasks: map[string]State{"old": Absent, "young": Live}},
			report: []string{"young"}, release: []string{"old"}},
		{name: "a Brewlet container runs without a lease: incomplete", leases: []hoststate.Lease{old},
			view: &taskView{tasks: map[string]State{"old": Live}, unleased: []string{"c9"}}, report: []string{"old"}},
		{name: "mixed", leases: []hoststate.Lease{lease("a", time.Hour), lease("b", time.Hour), lease("c", time.Second), lease("d", time.Hour)},
			view:   &taskView{tasks: map[string]State{"a": Live, "b": Absent, "c": Absent, "d": Stopped}},
			report: []string{"a", "c"}, release: []string{"b"}, complete: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideTasks(tc.leases, tc.leasesErr, tc.view, now, grace)
			if got := ids(d.report); !reflect.DeepEqual(got, tc.report) {
				t.Errorf("report %v, want %v", got, tc.report)
			}
			if got := ids(d.release); !reflect.DeepEqual(got, tc.release) {
				t.Errorf("release %v, want %v", got, tc.release)
			}
			if d.complete != tc.complete {
				t.Errorf("complete %v, want %v", d.complete, tc.complete)
			}
		})
	}
}

// fakeTasks is containerd as a table; get overrides what Get answers per container.
type fakeTasks struct {
	mu      sync.Mutex
	listErr error
	listed  map[string]State
	brewlet []string
	get     map[string]State
	getErr  map[string]error
	asked   []string
}

func (f *fakeTasks) List(context.Context) (map[string]State, []string, error) {
	if f.listErr != nil {
		return nil, nil, f.listErr
	}
	return f.listed, f.brewlet, nil
}

func (f *fakeTasks) Get(_ context.Context, id string) (State, error) {
	f.mu.Lock()
	f.asked = append(f.asked, id)
	f.mu.Unlock()
	if err := f.getErr[id]; err != nil {
		return Unknown, err
	}
	return f.get[id], nil
}

// writeLease writes a lease file as the shim's LeaseCurrent does (with its own creation time).
func writeLease(t *testing.T, l hoststate.Layout, ls hoststate.Lease) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(l.LeaseFile(ls.ContainerID)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteGeneration(hoststate.Generation{ID: ls.ID, Epoch: "e1", Generation: 1, Digest: "sha256:x", UID: 10001, GID: 10001,
		Layers: []string{"sha256:a"}}); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	if err := l.SetCurrent(ls.ID, hoststate.Ref{Epoch: "e1", Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.LeaseCurrent(ls); err != nil {
		t.Fatal(err)
	}
}

func TestReportTasksReconciles(t *testing.T) {
	host := hoststate.Under(t.TempDir())
	old := time.Now().Add(-time.Hour).UTC()
	for _, cid := range []string{"live", "gone", "slow", "fresh", "stopped"} {
		created := old
		if cid == "fresh" {
			created = time.Now().UTC()
		}
		writeLease(t, host, hoststate.Lease{ContainerID: cid, ID: "python-3.12", PodNamespace: "default", PodName: "p-" + cid,
			PodUID: "uid-" + cid, ContainerName: "app", CreatedAt: created})
	}
	if err := os.MkdirAll(host.ContainerDir("gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := &fakeTasks{
		// "slow" is left out of the list (its shim did not answer in time) but Get finds it.
		listed: map[string]State{"live": Live, "stopped": Stopped, "other": Live},
		get:    map[string]State{"gone": Absent, "slow": Live, "fresh": Absent},
	}
	var logs []string
	a := &Reporter{Layout: host, Source: src, Log: func(f string, args ...any) { logs = append(logs, f) }}
	tasks, complete := a.Report(context.Background())
	if !complete {
		t.Errorf("incomplete; logs %v", logs)
	}
	var names []string
	for _, tk := range tasks {
		names = append(names, tk.PodName)
	}
	if want := []string{"p-fresh", "p-live", "p-slow"}; !reflect.DeepEqual(names, want) {
		t.Errorf("reported %v, want %v", names, want)
	}
	if _, err := os.Stat(host.LeaseFile("gone")); !os.IsNotExist(err) {
		t.Errorf("stale lease kept: %v", err)
	}
	if _, err := os.Stat(host.ContainerDir("gone")); !os.IsNotExist(err) {
		t.Errorf("stale exec state kept: %v", err)
	}
	for _, cid := range []string{"live", "slow", "fresh", "stopped"} {
		if _, err := os.Stat(host.LeaseFile(cid)); err != nil {
			t.Errorf("lease %s released: %v", cid, err)
		}
	}

	t.Run("not the writer: nothing released, nothing stale reported", func(t *testing.T) {
		writeLease(t, host, hoststate.Lease{ContainerID: "gone2", ID: "python-3.12", PodName: "p-gone2", CreatedAt: old})
		a.MayWrite = func() error { return errors.New("not the writer") }
		defer func() { a.MayWrite = nil }()
		tasks, _ := a.Report(context.Background())
		for _, tk := range tasks {
			if tk.PodName == "p-gone2" {
				t.Error("a lease without a task reported as running")
			}
		}
		if _, err := os.Stat(host.LeaseFile("gone2")); err != nil {
			t.Errorf("a non-writer released a lease: %v", err)
		}
	})

	t.Run("containerd unreachable: leases kept and reported, incomplete", func(t *testing.T) {
		before, _ := host.Leases()
		a.Source = &fakeTasks{listErr: errors.New("connection refused")}
		tasks, complete := a.Report(context.Background())
		if complete || len(tasks) != len(before) {
			t.Errorf("complete %v, %d tasks for %d leases", complete, len(tasks), len(before))
		}
		after, _ := host.Leases()
		if len(after) != len(before) {
			t.Errorf("leases %d -> %d", len(before), len(after))
		}
	})

	t.Run("containerd cannot tell about one container: kept, reported, incomplete", func(t *testing.T) {
		a.Source = &fakeTasks{listed: map[string]State{}, getErr: map[string]error{"gone2": errors.New("deadline exceeded")},
			get: map[string]State{"live": Live, "slow": Live, "fresh": Live, "stopped": Stopped}}
		tasks, complete := a.Report(context.Background())
		if complete {
			t.Error("complete although a task's state is unknown")
		}
		found := false
		for _, tk := range tasks {
			found = found || tk.PodName == "p-gone2"
		}
		if !found {
			t.Error("a container containerd could not account for was not reported")
		}
		if _, err := os.Stat(host.LeaseFile("gone2")); err != nil {
			t.Errorf("released although containerd could not tell: %v", err)
		}
	})

	t.Run("a live Brewlet container without a lease makes the report incomplete", func(t *testing.T) {
		a.Source = &fakeTasks{listed: map[string]State{"live": Live, "slow": Live, "fresh": Live, "gone2": Live,
			"stopped": Stopped, "nolease": Live, "exited": Stopped},
			brewlet: []string{"live", "nolease", "exited"}, get: map[string]State{"nolease": Live}}
		if _, complete := a.Report(context.Background()); complete {
			t.Error("complete although a Brewlet container runs without a lease")
		}
		// Deleted meanwhile: asked again, it is gone, and the report is complete.
		a.Source = &fakeTasks{listed: map[string]State{"live": Live, "slow": Live, "fresh": Live, "gone2": Live,
			"stopped": Stopped, "nolease": Live}, brewlet: []string{"nolease"}, get: map[string]State{"nolease": Absent}}
		if _, complete := a.Report(context.Background()); !complete {
			t.Error("incomplete although the unleased container was gone when asked again")
		}
	})
}

func TestNoTaskSourceIsIncomplete(t *testing.T) {
	host := hoststate.Under(t.TempDir())
	writeLease(t, host, hoststate.Lease{ContainerID: "c1", ID: "python-3.12", PodName: "p", CreatedAt: time.Now().Add(-time.Hour).UTC()})
	a := &Reporter{Layout: host}
	tasks, complete := a.Report(context.Background())
	if complete || len(tasks) != 1 {
		t.Fatalf("complete %v tasks %+v", complete, tasks)
	}
}

// TestReportRemovesLeasesTornByACrash: a lease file a crash left empty (leases are not
// synced) is removed by the node's writer in the same pass that reports, once it predates
// the boot; then the report is complete. A non-writer leaves it, and reports incomplete.
func TestReportRemovesLeasesTornByACrash(t *testing.T) {
	host := hoststate.Under(t.TempDir())
	writeLease(t, host, hoststate.Lease{ContainerID: "live", ID: "python-3.12", PodName: "p-live", CreatedAt: time.Now().UTC()})
	boot := time.Now().Add(-time.Hour)
	torn := host.LeaseFile("torn")
	if err := os.WriteFile(torn, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(torn, boot.Add(-time.Minute), boot.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	src := &fakeTasks{listed: map[string]State{"live": Live}}
	a := &Reporter{Layout: host, Source: src, BootTime: func() (time.Time, error) { return boot, nil },
		MayWrite: func() error { return errors.New("not the writer") }}
	if _, complete := a.Report(context.Background()); complete {
		t.Error("complete although a lease is unreadable")
	}
	if _, err := os.Stat(torn); err != nil {
		t.Fatalf("a non-writer removed a lease file: %v", err)
	}
	a.BootTime = func() (time.Time, error) { return time.Time{}, errors.New("no /proc") }
	a.MayWrite = nil
	if _, complete := a.Report(context.Background()); complete {
		t.Error("complete although the boot time is unknown and a lease unreadable")
	}
	if _, err := os.Stat(torn); err != nil {
		t.Fatalf("removed without knowing the boot time: %v", err)
	}
	a.BootTime = func() (time.Time, error) { return boot, nil }
	tasks, complete := a.Report(context.Background())
	if !complete || len(tasks) != 1 || tasks[0].PodName != "p-live" {
		t.Errorf("complete %v, tasks %+v", complete, tasks)
	}
	if _, err := os.Stat(torn); !os.IsNotExist(err) {
		t.Errorf("torn lease kept: %v", err)
	}
}
