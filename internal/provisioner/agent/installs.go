package agent

import (
	"context"
	"sync"
	"time"

	"brewlet.sh/brewlet/internal/provisioner/install"
)

// minRetryPause bounds how often a failed pull of one generation is tried again.
const minRetryPause = 10 * time.Second

// jobs runs installs, at most one per runtime ID, each in its own goroutine with its own
// context, so a pass (and with it every other ID's authorization renewal) never waits for a
// registry. The pass reads their state; a finished install wakes the loop.
type jobs struct {
	mu      sync.Mutex
	running map[string]*job       // by runtime ID
	last    map[string]*jobResult // the last finished install of each ID
	started int                   // installs started so far
	wg      sync.WaitGroup
	// finished receives a value when an install ends (buffered: a wake-up, not a queue).
	finished chan struct{}
}

type job struct {
	req    install.Request
	cancel context.CancelFunc
	done   chan struct{}
}

type jobResult struct {
	req install.Request
	err error
	at  time.Time
}

func newJobs() *jobs {
	return &jobs{running: map[string]*job{}, last: map[string]*jobResult{}, finished: make(chan struct{}, 1)}
}

// state reports whether an install of exactly req runs, and the last finished install of
// exactly req (nil if none).
func (j *jobs) state(req install.Request) (running bool, last *jobResult) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r := j.running[req.ID]; r != nil && r.req == req {
		running = true
	}
	if l := j.last[req.ID]; l != nil && l.req == req {
		last = l
	}
	return running, last
}

func (j *jobs) isRunning(id string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.running[id] != nil
}

// startedCount is the number of installs started so far.
func (j *jobs) startedCount() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.started
}

// busy reports whether any install runs.
func (j *jobs) busy() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.running) > 0
}

// start runs install(req) unless an install of the ID still runs (a superseded one winding
// down after its cancel: two installs of one ID never race to flip current). It reports
// whether req runs now.
func (j *jobs) start(ctx context.Context, req install.Request, install func(context.Context, install.Request) error) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r := j.running[req.ID]; r != nil {
		return r.req == req
	}
	jctx, cancel := context.WithCancel(ctx)
	r := &job{req: req, cancel: cancel, done: make(chan struct{})}
	j.running[req.ID] = r
	j.started++
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		defer close(r.done)
		err := install(jctx, req)
		cancel()
		j.mu.Lock()
		delete(j.running, req.ID)
		j.last[req.ID] = &jobResult{req: req, err: err, at: time.Now()}
		j.mu.Unlock()
		select {
		case j.finished <- struct{}{}:
		default:
		}
	}()
	return true
}

// cancel stops the install of id unless it installs keep.
func (j *jobs) cancel(id string, keep *install.Request) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r := j.running[id]; r != nil && (keep == nil || r.req != *keep) {
		r.cancel()
	}
}

// wait returns when no install runs.
func (j *jobs) wait() { j.wg.Wait() }

// stopAll cancels every install and waits for them.
func (j *jobs) stopAll() {
	j.mu.Lock()
	for _, r := range j.running {
		r.cancel()
	}
	j.mu.Unlock()
	j.wg.Wait()
}
