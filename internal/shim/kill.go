package shim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Kill signals a container's init process itself when that is all `runc kill` would do:
// a signal other than SIGKILL, to the init process only, of a running container. runc then
// checks that the recorded init process still runs (same start time, not a zombie) and
// signals it; doing the same here saves the exec of runc that CRI's StopContainer otherwise
// waits for on every stop. Everything else (SIGKILL, which runc extends to the whole
// container or thaws it for; signals to all processes or to an exec; a container not
// running; any check that cannot be made) goes to the runc code unchanged, which also gives
// the stock errors.
func (s *service) Kill(ctx context.Context, r *taskAPI.KillRequest) (*emptypb.Empty, error) {
	if r.ExecID == "" {
		s.killed.LoadOrStore(r.ID, time.Now())
	}
	if r.ExecID == "" && !r.All && r.Signal != uint32(unix.SIGKILL) && r.Signal > 0 && r.Signal < 65 {
		if st, err := s.State(ctx, &taskAPI.StateRequest{ID: r.ID}); err == nil &&
			st.Status == task.Status_RUNNING && signalInit(ctx, bundleOf(r.ID), r.ID, st.Pid, unix.Signal(r.Signal)) == nil {
			return &emptypb.Empty{}, nil
		}
	}
	return s.TTRPCTaskService.Kill(ctx, r)
}

// errNotInit is any reason signalInit leaves the signal to runc.
var errNotInit = errors.New("not the recorded init process")

// signalInit sends sig to the container's init process pid, after proving it is the
// process runc recorded: runc's state names pid, and a pidfd opened on pid refers to a
// living process whose start time is the recorded one. The pidfd pins that process, so the
// signal cannot reach another one that reused the PID.
func signalInit(ctx context.Context, bundle, id string, pid uint32, sig unix.Signal) error {
	dir, ok := runcStateDir(ctx, bundle, id)
	if !ok || pid < 2 {
		return errNotInit
	}
	rec, err := readInitRecord(filepath.Join(dir, "state.json"))
	if err != nil || rec.Pid != int(pid) {
		return errNotInit
	}
	fd, err := unix.PidfdOpen(int(pid), 0)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }()
	start, state, err := procStart(int(pid))
	if err != nil || start != rec.Start || state == 'Z' || state == 'X' {
		return errNotInit
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}

// initRecord is what runc's state file says about the init process.
type initRecord struct {
	Pid   int    `json:"init_process_pid"`
	Start uint64 `json:"init_process_start"`
}

// maxRuncState bounds the read of runc's state file (it holds the container's config:
// kilobytes, not megabytes).
const maxRuncState = 4 << 20

func readInitRecord(path string) (initRecord, error) {
	var rec initRecord
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return rec, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxRuncState+1))
	if err != nil {
		return rec, err
	}
	if len(b) > maxRuncState {
		return rec, errNotInit
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, err
	}
	if rec.Pid < 2 || rec.Start == 0 {
		return rec, errNotInit
	}
	return rec, nil
}

// procStart reads a process's start time (clock ticks after boot) and state letter from
// /proc/<pid>/stat.
func procStart(pid int) (uint64, byte, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat takes the fields after the command name, which may itself hold spaces and
// parentheses: it ends at the last ')'. The state is the first of them, the start time
// the 20th (field 22 of proc_pid_stat(5)).
func parseProcStat(s string) (uint64, byte, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, errNotInit
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, errNotInit
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, errNotInit
	}
	return start, f[0][0], nil
}
