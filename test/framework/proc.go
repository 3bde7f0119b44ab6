package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"brewlet.sh/brewlet/test/framework/hostops"
)

// Process is a component the harness started. It runs in its own process group and dies
// with the test process (parent-death signal), so nothing outlives a killed test binary
// except what its children detach on purpose (containerd shims; see the janitor).
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	rec     ProcRecord
	done    chan struct{}
	waitErr error
}

// keepRunning: components outlive the process that started them (see KeepRunning).
var keepRunning atomic.Bool

// KeepRunning makes every component started afterwards outlive this process: a session of
// its own and no parent-death signal. Only `make demo` (hack/demo) uses it; its components
// are removed by `make down` (SweepAll), never by a test's sweep, which looks only below its
// own BaseDir.
func KeepRunning() { keepRunning.Store(true) }

// Start runs a component with its output in the instance's logs directory.
func (in *Instance) Start(name string, env []string, args ...string) (*Process, error) {
	logPath := filepath.Join(in.Dir, "logs", name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if keepRunning.Load() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	p.rec, _ = hostops.Record(name, cmd.Process.Pid)
	go func() {
		p.waitErr = cmd.Wait()
		_ = lf.Close()
		close(p.done)
	}()
	in.mu.Lock()
	in.procs = append(in.procs, p)
	in.mu.Unlock()
	in.Update(func(r *Resources) { r.Processes = append(r.Processes, p.rec) })
	return p, nil
}

// Alive reports whether the process still runs.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if !p.Alive() {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string { return hostops.TailFile(p.LogPath, n) }

// WaitReady polls check until it succeeds, the process exits, or the timeout passes; the
// error then carries the end of the component's log.
func (p *Process) WaitReady(timeout time.Duration, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v) before it was ready; log:\n%s", p.Name, p.waitErr, p.Tail(30))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %v; log:\n%s", p.Name, timeout, last, p.Tail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
