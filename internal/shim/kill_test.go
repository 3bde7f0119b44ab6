package shim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/runc"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"golang.org/x/sys/unix"
)

func TestParseProcStat(t *testing.T) {
	tail := " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20 21"
	for _, tc := range []struct {
		name, in string
		start    uint64
		state    byte
		ok       bool
	}{
		{"plain", "17 (python3)" + tail, 4242, 'S', true},
		{"name with spaces and parentheses", "17 (a) R 1 (b) c)" + tail, 4242, 'S', true},
		{"name posing as the fields", "17 (x) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 1 20)" + tail, 4242, 'S', true},
		{"zombie", "17 (sh) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99 20", 99, 'Z', true},
		{"no name", "17 python3" + tail, 0, 0, false},
		{"too few fields", "17 (sh) S 1 2 3", 0, 0, false},
		{"start not a number", "17 (sh) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x 20", 0, 0, false},
		{"state not a letter", "17 (sh) SS 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99 20", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start, state, err := parseProcStat(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (start != tc.start || state != tc.state) {
				t.Fatalf("start %d state %c, want %d %c", start, state, tc.start, tc.state)
			}
		})
	}
}

// A container's process chooses its own name: whatever it is, the fields after it parse.
func FuzzParseProcStat(f *testing.F) {
	f.Add("python3", uint64(4242))
	f.Add("a) R 1 (b", uint64(1))
	f.Fuzz(func(t *testing.T, comm string, start uint64) {
		if len(comm) > 64 || strings.ContainsAny(comm, "\n\x00") {
			return
		}
		line := fmt.Sprintf("17 (%s) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 %d 20 21\n", comm, start)
		got, state, err := parseProcStat(line)
		if err != nil || got != start || state != 'S' {
			t.Fatalf("comm %q: start %d state %c err %v, want %d S", comm, got, state, err, start)
		}
		_, _, _ = parseProcStat(comm) // any bytes: an error or a result, never a panic
	})
}

// signalInit signals only the process runc recorded, alive: a PID whose start time differs
// (reused), a zombie, a state file naming another PID or a state file that is a symlink
// all leave the signal to runc.
func TestSignalInitOnlyTheRecordedProcess(t *testing.T) {
	for _, tc := range []struct {
		name   string
		record func(pid int, start uint64) any
		link   bool
		zombie bool
		want   bool
	}{
		{"the recorded process", func(pid int, start uint64) any { return initRecord{pid, start} }, false, false, true},
		{"start time differs (PID reused)", func(pid int, start uint64) any { return initRecord{pid, start + 1} }, false, false, false},
		{"another PID recorded", func(pid int, start uint64) any { return initRecord{pid + 1, start} }, false, false, false},
		{"no start recorded", func(pid int, _ uint64) any { return map[string]int{"init_process_pid": pid} }, false, false, false},
		{"state file is a symlink", func(pid int, start uint64) any { return initRecord{pid, start} }, true, false, false},
		{"zombie", func(pid int, start uint64) any { return initRecord{pid, start} }, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "60")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			waited := false
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				if !waited {
					_ = cmd.Wait()
				}
			})
			start, _, err := procStart(pid)
			if err != nil {
				t.Fatal(err)
			}
			if tc.zombie {
				_ = cmd.Process.Kill()
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					if _, st, _ := procStart(pid); st == 'Z' {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the killed child did not become a zombie")
					}
				}
			}
			dir := t.TempDir()
			runcRoot, b := filepath.Join(dir, "runc"), filepath.Join(dir, "bundles", "c1")
			state := filepath.Join(runcRoot, "k8s.io", "c1")
			for _, d := range []string{b, state} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := runc.WriteOptions(b, &options.Options{Root: runcRoot}); err != nil {
				t.Fatal(err)
			}
			js, _ := json.Marshal(tc.record(pid, start))
			file := filepath.Join(state, "state.json")
			if tc.link {
				file = filepath.Join(dir, "elsewhere.json")
				if err := os.Symlink(file, filepath.Join(state, "state.json")); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(file, js, 0o600); err != nil {
				t.Fatal(err)
			}
			ctx := namespaces.WithNamespace(context.Background(), "k8s.io")
			err = signalInit(ctx, b, "c1", uint32(pid), unix.SIGTERM)
			if (err == nil) != tc.want {
				t.Fatalf("signalled: %v (%v), want %v", err == nil, err, tc.want)
			}
			if tc.zombie {
				return
			}
			werr := make(chan error, 1)
			go func() { werr <- cmd.Wait() }()
			select {
			case err := <-werr:
				waited = true
				if !tc.want {
					t.Fatalf("the process exited (%v) although it was not signalled", err)
				}
				if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGTERM {
					t.Fatalf("exit %v, want SIGTERM", cmd.ProcessState)
				}
			case <-time.After(500 * time.Millisecond):
				if tc.want {
					t.Fatal("the recorded process was not signalled")
				}
				_ = cmd.Process.Kill()
				t.Logf("the unsignalled process, killed: %v", <-werr)
				waited = true
			}
		})
	}
}
