// Package hostops is what the test harness does to the host, always limited to what it
// started or owns: processes recorded with their start time (a reused PID is never
// killed), its cgroups, mounts under its own directories and its bridge; and the node
// mount namespace the e2e binaries enter.
package hostops

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ProcRecord identifies a process across PID reuse.
type ProcRecord struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	StartTime string `json:"startTime"`
}

// Record reads a process's start time so a later kill can tell it from a reused PID.
func Record(name string, pid int) (ProcRecord, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcRecord{}, err
	}
	// Field 2 (comm) may contain spaces; fields after the last ')' are fixed.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return ProcRecord{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	return ProcRecord{Name: name, PID: pid, StartTime: f[19]}, nil
}

func Same(p ProcRecord) bool {
	cur, err := Record(p.Name, p.PID)
	return err == nil && cur.StartTime == p.StartTime
}

func Kill(p ProcRecord) {
	if p.PID > 0 && Same(p) {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
		WaitGone(p, 5*time.Second)
	}
}

func WaitGone(p ProcRecord, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && Same(p) {
		if isZombie(p.PID) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] == "Z"
}

// KillReferencing kills processes whose command line names a path under dir. Only our
// own processes do: every socket, root and log of an instance is under its directory.
func KillReferencing(dir string) {
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cmd, []byte(dir+"/")) {
			continue
		}
		if rec, err := Record("ref", pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			WaitGone(rec, 5*time.Second)
		}
	}
}

// CgroupDirs lists the instance's cgroup directory in every mounted hierarchy.
func CgroupDirs(parent string) []string {
	var out []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{filepath.Join("/sys/fs/cgroup", parent)} // cgroup v2
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		if fi, err := os.Lstat(h); err == nil && fi.IsDir() {
			out = append(out, filepath.Join(h, parent))
		}
	}
	return out
}

func KillCgroupProcesses(parent string) {
	for _, root := range CgroupDirs(parent) {
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil || !fi.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, l := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(l); err == nil && pid > 1 && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
}

// RemoveCgroups removes the instance's cgroup subtree, deepest first, waiting for killed
// processes to leave it.
func RemoveCgroups(parent string) error {
	var lastErr error
	for _, root := range CgroupDirs(parent) {
		if _, err := os.Stat(root); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for i := 0; i < 50; i++ {
				if err = unix.Rmdir(d); err == nil || os.IsNotExist(err) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				lastErr = fmt.Errorf("remove cgroup %s: %w", d, err)
			}
		}
	}
	return lastErr
}

// UnmountUnder unmounts every mount point below dir, deepest first.
func UnmountUnder(dir string) error {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		mounts := MountsUnder(dir)
		if len(mounts) == 0 {
			return nil
		}
		sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
		for _, m := range mounts {
			if err := unix.Unmount(m, 0); err != nil {
				if err2 := unix.Unmount(m, unix.MNT_DETACH); err2 != nil && err2 != unix.EINVAL && err2 != unix.ENOENT {
					lastErr = fmt.Errorf("unmount %s: %w", m, err2)
				}
			}
		}
	}
	if left := MountsUnder(dir); len(left) > 0 {
		return fmt.Errorf("mounts left under %s: %v (%v)", dir, left, lastErr)
	}
	return nil
}

func MountsUnder(dir string) []string {
	var out []string
	for _, mp := range MountPoints() {
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// MountPoints lists this process's mount points, unescaped, in mount-table order (nil
// when the table cannot be read).
func MountPoints() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 5 {
			out = append(out, UnescapeMount(fields[4]))
		}
	}
	return out
}

func UnescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func DeleteLink(name string) error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", name)); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "del", name).CombinedOutput(); err != nil {
		// A veth goes with its peer's namespace: killing a node's namespace holder removes
		// its machine end a moment later, possibly between the check above and the delete.
		if _, serr := os.Stat(filepath.Join("/sys/class/net", name)); os.IsNotExist(serr) {
			return nil
		}
		return fmt.Errorf("ip link del %s: %v: %s", name, err, out)
	}
	return nil
}

func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
