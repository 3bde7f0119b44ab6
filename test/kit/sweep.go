package kit

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"brewlet.sh/brewlet/test/framework"
)

// StartHelper runs one test of this binary as a child with env set, waits for its line
// "HELPER-READY <n fields>", and returns the fields and a kill that ends the child with
// SIGKILL, as a CI timeout would (also done at cleanup).
func StartHelper(t *testing.T, test, env string, n int) ([]string, func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	var once sync.Once
	kill := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			cancel()
		})
	}
	t.Cleanup(kill)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == n+1 && f[0] == "HELPER-READY" {
			return f[1:], kill
		}
	}
	kill()
	t.Fatalf("helper %s never reported ready", test)
	return nil, nil
}

// SweepLeavesNothing sweeps until every dir is gone (within timeout) and checks that no
// process, bridge, cgroup or mount of the killed instance is left.
func SweepLeavesNothing(t *testing.T, timeout time.Duration, bridge, cgroup string, dirs ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		errs := framework.Sweep()
		gone := true
		for _, d := range dirs {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				gone = false
			}
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sweep did not remove %v: %v", dirs, errs)
		}
		time.Sleep(time.Second)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, d := range dirs {
		if ProcessReferences(d) {
			t.Errorf("a process still references %s after the sweep", d)
		}
		if strings.Contains(string(mi), d) {
			t.Errorf("mounts left under %s", d)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + bridge); !os.IsNotExist(err) {
		t.Errorf("bridge %s left", bridge)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroup); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
}

func ProcessReferences(dir string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), dir+"/") {
			return true
		}
	}
	return false
}
