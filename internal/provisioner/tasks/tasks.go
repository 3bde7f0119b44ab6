package tasks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	taskapi "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// DefaultGrace is how young a lease may be without a task behind it: the shim writes
// the lease before it asks runc to create the task (and may compose the root filesystem
// in between), so a fresh lease with no task is a container being created, not a dead one.
// It matches the kubelet's default runtime request timeout.
const DefaultGrace = 2 * time.Minute

// criNamespace is containerd's namespace of the CRI plugin: every Kubernetes container.
const criNamespace = "k8s.io"

// containerdTimeout bounds one pass's questions to containerd: a containerd that does not
// answer makes the report incomplete, it never holds the pass.
const containerdTimeout = 15 * time.Second

// State is what containerd says about one container's task.
type State int

const (
	// Absent: containerd has no task for the container (deleted, or never created).
	Absent State = iota
	// Live: Created, Running, Paused or Pausing: the container holds its generation.
	Live
	// Stopped: exited, not yet deleted; its shim releases the lease when it is.
	Stopped
	// Unknown: containerd lists the task but cannot say its state (its shim does not
	// answer, or reports a status containerd does not know).
	Unknown
)

func (s State) String() string {
	switch s {
	case Absent:
		return "absent"
	case Live:
		return "live"
	case Stopped:
		return "stopped"
	}
	return "unknown"
}

// stateOf maps containerd's task status.
func stateOf(s taskapi.Status) State {
	switch s {
	case taskapi.Status_CREATED, taskapi.Status_RUNNING, taskapi.Status_PAUSED, taskapi.Status_PAUSING:
		return Live
	case taskapi.Status_STOPPED:
		return Stopped
	}
	return Unknown
}

// Source answers for containerd's tasks in the CRI namespace.
type Source interface {
	// List returns the state of every task containerd lists, by container ID, and the IDs of
	// the application containers (not pod sandboxes) that run on the Brewlet shim.
	List(ctx context.Context) (tasks map[string]State, brewlet []string, err error)
	// Get returns one container's task state: Absent when containerd has none, an error
	// when containerd cannot tell.
	Get(ctx context.Context, containerID string) (State, error)
}

// Containerd asks containerd through its gRPC socket.
type Containerd struct{ Socket string }

func (c *Containerd) dial() (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// List lists the CRI namespace's tasks and the Brewlet shim's application containers.
func (c *Containerd) List(ctx context.Context) (map[string]State, []string, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = conn.Close() }()
	ctx = namespaces.WithNamespace(ctx, criNamespace)
	tl, err := tasksapi.NewTasksClient(conn).List(ctx, &tasksapi.ListTasksRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("list containerd tasks at %s: %w", c.Socket, err)
	}
	tasks := map[string]State{}
	for _, p := range tl.Tasks {
		tasks[p.ID] = stateOf(p.Status)
	}
	cl, err := containersapi.NewContainersClient(conn).List(ctx, &containersapi.ListContainersRequest{Filters: []string{
		fmt.Sprintf(`runtime.name==%q,labels."io.cri-containerd.kind"=="container"`, vocab.ShimRuntimeType)}})
	if err != nil {
		return nil, nil, fmt.Errorf("list containerd containers at %s: %w", c.Socket, err)
	}
	var brewlet []string
	for _, ct := range cl.Containers {
		brewlet = append(brewlet, ct.ID)
	}
	return tasks, brewlet, nil
}

// ShimContainers counts containerd's containers on the Brewlet shim, pod sandboxes
// included: while any exists, the shim binary and the handler stay.
func (c *Containerd) ShimContainers(ctx context.Context) (int, error) {
	conn, err := c.dial()
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	cl, err := containersapi.NewContainersClient(conn).List(namespaces.WithNamespace(ctx, criNamespace), &containersapi.ListContainersRequest{
		Filters: []string{fmt.Sprintf(`runtime.name==%q`, vocab.ShimRuntimeType)}})
	if err != nil {
		return 0, fmt.Errorf("list containerd containers at %s: %w", c.Socket, err)
	}
	return len(cl.Containers), nil
}

// Get asks for one container's task.
func (c *Containerd) Get(ctx context.Context, containerID string) (State, error) {
	conn, err := c.dial()
	if err != nil {
		return Unknown, err
	}
	defer func() { _ = conn.Close() }()
	r, err := tasksapi.NewTasksClient(conn).Get(namespaces.WithNamespace(ctx, criNamespace), &tasksapi.GetRequest{ContainerID: containerID})
	if status.Code(err) == codes.NotFound {
		return Absent, nil
	}
	if err != nil {
		return Unknown, fmt.Errorf("containerd task %s: %w", containerID, err)
	}
	return stateOf(r.Process.Status), nil
}

// taskView is containerd's side of one pass: the state of the task of every lease's
// container, and how many Brewlet application containers run without a lease.
type taskView struct {
	tasks    map[string]State
	unleased []string // live Brewlet containers without a lease: the report cannot describe them
}

// taskDecision is what a pass reports and releases.
type taskDecision struct {
	report   []hoststate.Lease // running (or being created): reported as status.tasks
	release  []hoststate.Lease // no task and older than the grace: the shim died before releasing
	complete bool
}

// decideTasks reconciles the shim's leases against containerd's tasks. leasesErr is an
// unreadable lease (the readable ones are still decided); view nil means containerd could
// not be asked: every lease is reported as it is, none is released, and the report is
// incomplete. A lease is reported when its task is live, when containerd cannot say (never
// under-report), or when it is younger than grace and has no task yet (a container being
// created). It is released when containerd has no task for it and it is older than grace.
// A stopped task is neither: it no longer runs, and its shim releases the lease at delete.
func decideTasks(leases []hoststate.Lease, leasesErr error, view *taskView, now time.Time, grace time.Duration) taskDecision {
	d := taskDecision{complete: leasesErr == nil && view != nil}
	if view == nil {
		d.report = append(d.report, leases...)
		return d
	}
	if len(view.unleased) > 0 {
		d.complete = false
	}
	for _, l := range leases {
		young := now.Sub(l.CreatedAt) < grace // a lease from the future (clock step) is young
		switch view.tasks[l.ContainerID] {
		case Live:
			d.report = append(d.report, l)
		case Unknown:
			d.report = append(d.report, l)
			d.complete = false
		case Stopped:
		case Absent:
			if young {
				d.report = append(d.report, l)
			} else {
				d.release = append(d.release, l)
			}
		}
	}
	return d
}

// observation is one pass's reading of the leases and of containerd.
type observation struct {
	leases        []hoststate.Lease
	leasesErr     error     // an unreadable lease (the readable ones are in leases)
	view          *taskView // nil: containerd could not be asked
	containerdErr error     // why view is nil, or the questions about single tasks that failed
}

// observeTasks asks containerd for its tasks, then reads the leases, then asks again about
// every disagreement: containerd's task list leaves out a task whose shim is slow to answer,
// so a lease is released only after containerd said, for that container alone, that it has
// no task. Tasks are listed before the leases are read: the shim writes a lease before the
// task exists and releases it after the task is gone, so a live Brewlet task without a lease
// that is still live when asked again really has none.
func observeTasks(ctx context.Context, src Source, layout hoststate.Layout) observation {
	var o observation
	if src == nil {
		o.leases, o.leasesErr = layout.Leases()
		o.containerdErr = errors.New("no containerd to ask (the agent has no task source)")
		return o
	}
	ctx, cancel := context.WithTimeout(ctx, containerdTimeout)
	defer cancel()
	listed, brewlet, err := src.List(ctx)
	o.leases, o.leasesErr = layout.Leases()
	if err != nil {
		o.containerdErr = err
		return o
	}
	view := &taskView{tasks: map[string]State{}}
	leased := map[string]bool{}
	for _, l := range o.leases {
		leased[l.ContainerID] = true
		st, ok := listed[l.ContainerID]
		if !ok || st == Unknown {
			if st, err = src.Get(ctx, l.ContainerID); err != nil {
				st = Unknown
				o.containerdErr = errors.Join(o.containerdErr, err)
			}
		}
		view.tasks[l.ContainerID] = st
	}
	for _, id := range brewlet {
		if leased[id] || listed[id] != Live {
			continue
		}
		if _, err := os.Stat(layout.LeaseFile(id)); err == nil {
			continue // leased after the leases were read
		}
		if st, err := src.Get(ctx, id); err != nil || st == Live {
			view.unleased = append(view.unleased, id)
		}
	}
	sort.Strings(view.unleased)
	o.view = view
	return o
}

// Reporter reconciles the shim's leases against containerd for the node's report
// (docs/provisioner.md, "Task report").
type Reporter struct {
	// Source answers which containers containerd still runs (nil: nobody to ask, so the
	// report is never complete and no lease is released).
	Source Source
	Layout hoststate.Layout
	// Grace is how old a lease must be before its missing task makes it stale (0:
	// DefaultGrace).
	Grace time.Duration
	// MayWrite is asked before each lease release (nil: always the node's writer).
	MayWrite func() error
	// BootTime is when the machine booted (nil: hoststate.BootTime).
	BootTime func() (time.Time, error)
	Log      func(format string, args ...any)
}

func (a Reporter) logf(format string, args ...any) {
	if a.Log != nil {
		a.Log(format, args...)
	}
}

// Report releases the leases of containers containerd no longer has (as the node's writer
// only), and returns the tasks to report and whether the report is complete.
func (a Reporter) Report(ctx context.Context) ([]brewletv1.NodeTask, bool) {
	if a.MayWrite == nil || a.MayWrite() == nil {
		a.removeTornLeases() // before reading the leases, so this pass can account for all
	}
	o := observeTasks(ctx, a.Source, a.Layout)
	if o.leasesErr != nil {
		a.logf("node report incomplete: %v", o.leasesErr)
	}
	switch {
	case o.view == nil:
		a.logf("node report incomplete, leases reported as they are: %v", o.containerdErr)
	case o.containerdErr != nil:
		a.logf("node report incomplete, containers containerd could not account for are reported as running: %v", o.containerdErr)
	}
	if o.view != nil && len(o.view.unleased) > 0 {
		a.logf("node report incomplete: Brewlet containers run without a lease: %v", o.view.unleased)
	}
	grace := a.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	d := decideTasks(o.leases, o.leasesErr, o.view, time.Now(), grace)
	for _, l := range d.release {
		if a.MayWrite != nil && a.MayWrite() != nil {
			break // another agent writes this node: it releases them
		}
		released, err := a.Layout.ReleaseStaleLease(l)
		switch {
		case err != nil:
			a.logf("release the lease of container %s: %v", l.ContainerID, err)
		case released:
			a.logf("released the lease of container %s (pod %s/%s container %s, %s generation %d, leased %s): containerd has no task for it",
				l.ContainerID, l.PodNamespace, l.PodName, l.ContainerName, l.ID, l.Generation, l.CreatedAt.Format(time.RFC3339))
		}
	}
	if a.MayWrite == nil || a.MayWrite() == nil {
		if n, err := a.Layout.RemoveStaleLeaseTemps(time.Now().Add(-hoststate.StaleLeaseTempAge)); err != nil {
			a.logf("remove lease files a killed shim left: %v", err)
		} else if n > 0 {
			a.logf("removed %d temporary lease file(s) a killed shim left", n)
		}
	}
	tasks := make([]brewletv1.NodeTask, 0, len(d.report))
	for _, l := range d.report {
		tasks = append(tasks, brewletv1.NodeTask{PodNamespace: l.PodNamespace, PodName: l.PodName,
			PodUID: types.UID(l.PodUID), ContainerName: l.ContainerName, ID: l.ID, Epoch: types.UID(l.Epoch), Generation: l.Generation})
	}
	return tasks, d.complete
}

// removeTornLeases removes the lease files an earlier boot's crash left unreadable (leases are
// not synced; hoststate.RemoveTornLeases). Until they go, the leases cannot be accounted for:
// garbage collection keeps everything and the report stays incomplete.
func (a Reporter) removeTornLeases() {
	boot := a.BootTime
	if boot == nil {
		boot = hoststate.BootTime
	}
	bt, err := boot()
	if err != nil {
		a.logf("remove torn lease files: the machine's boot time: %v", err)
		return
	}
	if n, err := a.Layout.RemoveTornLeases(bt); err != nil {
		a.logf("remove torn lease files: %v", err)
	} else if n > 0 {
		a.logf("removed %d lease file(s) left unreadable by a crash before this boot (%s)", n, bt.Format(time.RFC3339))
	}
}
