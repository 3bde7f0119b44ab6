package tasks

import (
	"context"
	"os"
	"regexp"
	"time"

	eventtypes "github.com/containerd/containerd/api/events"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	"google.golang.org/protobuf/proto"

	"brewlet.sh/brewlet/internal/hoststate"
)

// Events wakes the agent when a container on a Brewlet runtime starts or exits, so
// that status.tasks (and from it the RuntimeImages' taskObservations and restart
// decisions) follows a rotation's restarts within seconds instead of a pass period.
// Only containers holding a shim lease count: other pods' churn never costs the node a
// pass (a pass reads the API server). Events are coalesced: the first one of a burst
// wakes the agent after wakeDelay, once. containerd's events are a hint; the pass asks
// containerd again and stays the source of truth, so a lost subscription only delays.
type Events struct {
	Socket string
	Layout hoststate.Layout
	Log    func(format string, args ...any)
}

// wakeDelay gathers a burst of exits (a node drained, a rollout's pods replaced) into one
// pass.
const wakeDelay = time.Second

// containerIDPattern is what containerd accepts as an identifier: anything else in an event
// is not looked up on disk.
var containerIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,75}$`)

// Run subscribes until ctx ends, subscribing again after errors (containerd restarting).
func (e Events) Run(ctx context.Context, wake chan<- struct{}) {
	backoff := time.Second
	for ctx.Err() == nil {
		opened := time.Now()
		err := e.subscribe(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		if time.Since(opened) > time.Minute {
			backoff = time.Second
		}
		if e.Log != nil {
			e.Log("containerd task events: %v (subscribing again in %s)", err, backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (e Events) subscribe(ctx context.Context, wake chan<- struct{}) error {
	conn, err := (&Containerd{Socket: e.Socket}).dial()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := eventsapi.NewEventsClient(conn).Subscribe(ctx, &eventsapi.SubscribeRequest{Filters: []string{
		`namespace=="` + criNamespace + `",topic=="/tasks/start"`,
		`namespace=="` + criNamespace + `",topic=="/tasks/exit"`,
	}})
	if err != nil {
		return err
	}
	var timer <-chan time.Time
	got := make(chan string)
	errs := make(chan error, 1)
	go func() {
		for {
			env, err := stream.Recv()
			if err != nil {
				errs <- err
				return
			}
			if id := containerOf(env.GetTopic(), env.GetEvent().GetValue()); id != "" {
				select {
				case got <- id:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case id := <-got:
			if timer == nil && e.leased(id) {
				timer = time.After(wakeDelay)
			}
		case <-timer:
			timer = nil
			select {
			case wake <- struct{}{}:
			default: // a pass is already due
			}
		}
	}
}

// containerOf is the container an event is about ("" for anything else or a malformed
// event).
func containerOf(topic string, body []byte) string {
	var id string
	switch topic {
	case "/tasks/start":
		ev := &eventtypes.TaskStart{}
		if proto.Unmarshal(body, ev) != nil {
			return ""
		}
		id = ev.ContainerID
	case "/tasks/exit":
		ev := &eventtypes.TaskExit{}
		// An exec's exit (ID differs from the container's) ends no container.
		if proto.Unmarshal(body, ev) != nil || (ev.ID != "" && ev.ID != ev.ContainerID) {
			return ""
		}
		id = ev.ContainerID
	}
	if !containerIDPattern.MatchString(id) {
		return ""
	}
	return id
}

// leased: the container holds a shim lease, so it runs a Brewlet runtime. A task that
// exits keeps its lease until the shim's delete; one starting has it since create.
func (e Events) leased(id string) bool {
	_, err := os.Lstat(e.Layout.LeaseFile(id))
	return err == nil
}
