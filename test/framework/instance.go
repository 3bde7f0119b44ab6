package framework

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"brewlet.sh/brewlet/test/framework/hostops"
)

// BaseDir holds one directory per running harness instance. It is private to Brewlet's
// tests; nothing outside it is written except the bridge and cgroups each instance records.
func BaseDir() string {
	if d := os.Getenv("BREWLET_E2E_DIR"); d != "" {
		return d
	}
	return "/tmp/brewlet-e2e"
}

// Resources are the host resources an instance created outside ordinary child processes.
// They are persisted next to the instance so that a janitor can remove them when the test
// process died before it could (kill -9, a CI timeout).
type Resources struct {
	Owner        ProcRecord   `json:"owner"`
	Processes    []ProcRecord `json:"processes,omitempty"`
	Bridge       string       `json:"bridge,omitempty"`
	CgroupParent string       `json:"cgroupParent,omitempty"`
}

// ProcRecord identifies a process across PID reuse.
type ProcRecord = hostops.ProcRecord

// Instance is one harness component set (a control plane or a node) and its directory.
type Instance struct {
	Dir string
	ID  string

	mu      sync.Mutex
	res     Resources
	procs   []*Process
	hooks   []func()
	cleaned bool
}

var (
	liveMu    sync.Mutex
	instances = map[*Instance]bool{}
)

// NewInstance creates a private directory for a component set and registers its cleanup
// with the test and with the process-wide registry that Main drains on timeout or signal.
func NewInstance(t TB, kind string) *Instance {
	t.Helper()
	in, err := NewProcessInstance(kind)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			in.dumpLogs(t)
		}
		if err := in.Cleanup(); err != nil {
			t.Errorf("cleanup of %s: %v", in.Dir, err)
		}
	})
	return in
}

// NewProcessInstance is an instance that outlives the test that made it: it is removed when
// Main ends the test binary (or by the next run's sweep, when the binary was killed). For
// what later tests of the same process reuse, such as images built once.
func NewProcessInstance(kind string) (*Instance, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	dir := filepath.Join(BaseDir(), kind+"-"+id)
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("create instance dir: %w", err)
	}
	self, err := hostops.Record("test", os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("identify test process: %w", err)
	}
	in := &Instance{Dir: dir, ID: id, res: Resources{Owner: self}}
	in.persist()
	liveMu.Lock()
	instances[in] = true
	liveMu.Unlock()
	return in, nil
}

// Update changes the persisted resources.
func (in *Instance) Update(fn func(*Resources)) {
	in.mu.Lock()
	fn(&in.res)
	in.mu.Unlock()
	in.persist()
}

// OnCleanup registers fn to run first at cleanup (last registered runs first), while the
// instance's processes are still alive, e.g. to remove pods through CRI.
func (in *Instance) OnCleanup(fn func()) {
	in.mu.Lock()
	in.hooks = append(in.hooks, fn)
	in.mu.Unlock()
}

func (in *Instance) persist() {
	in.mu.Lock()
	b, _ := json.MarshalIndent(in.res, "", "  ")
	in.mu.Unlock()
	tmp := filepath.Join(in.Dir, ".resources.json.tmp")
	if os.WriteFile(tmp, b, 0o644) == nil {
		_ = os.Rename(tmp, filepath.Join(in.Dir, "resources.json"))
	}
}

// Cleanup stops everything the instance started and removes every trace of it. It is
// idempotent and safe to call from several places.
func (in *Instance) Cleanup() error {
	in.mu.Lock()
	if in.cleaned {
		in.mu.Unlock()
		return nil
	}
	in.cleaned = true
	hooks := append([]func(){}, in.hooks...)
	procs := append([]*Process{}, in.procs...)
	res := in.res
	in.mu.Unlock()
	liveMu.Lock()
	delete(instances, in)
	liveMu.Unlock()

	for i := len(hooks) - 1; i >= 0; i-- {
		runBounded(hooks[i], 60*time.Second)
	}
	var errs []error
	// Container processes first, so that shims and containerd exit cleanly.
	if res.CgroupParent != "" {
		hostops.KillCgroupProcesses(res.CgroupParent)
	}
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop(10 * time.Second)
	}
	errs = append(errs, removeHostResources(in.Dir, res)...)
	return errors.Join(errs...)
}

func runBounded(fn func(), d time.Duration) {
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// removeHostResources is shared by Cleanup and the janitor: it kills what is left, then
// removes mounts, the bridge, cgroups and the directory.
func removeHostResources(dir string, res Resources) []error {
	var errs []error
	// Newest first: a kubelet still running (make down) dies before its containerd and can
	// no longer restart the containers killed next.
	for i := len(res.Processes) - 1; i >= 0; i-- {
		hostops.Kill(res.Processes[i])
	}
	if res.CgroupParent != "" {
		hostops.KillCgroupProcesses(res.CgroupParent)
	}
	hostops.KillReferencing(dir) // containerd shims and anything else started with our paths
	if err := hostops.UnmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	if res.Bridge != "" {
		if err := hostops.DeleteLink(res.Bridge); err != nil {
			errs = append(errs, err)
		}
	}
	if res.CgroupParent != "" {
		if err := hostops.RemoveCgroups(res.CgroupParent); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
	}
	return errs
}

func (in *Instance) dumpLogs(t TB) {
	files, _ := filepath.Glob(filepath.Join(in.Dir, "logs", "*.log"))
	for _, f := range files {
		t.Logf("---- last lines of %s ----\n%s", filepath.Base(f), hostops.TailFile(f, 40))
	}
}

// CleanupAll removes every live instance of this process (used on timeout and signals).
func CleanupAll() {
	liveMu.Lock()
	list := make([]*Instance, 0, len(instances))
	for in := range instances {
		list = append(list, in)
	}
	liveMu.Unlock()
	for _, in := range list {
		_ = in.Cleanup()
	}
}

// instanceName is the directory name NewInstance gives: kind-id.
var instanceName = regexp.MustCompile(`^(cp|n|r|v|cli|trust|runtime-images|guest)-([0-9a-f]{8})$`)

// check refuses resources that NewInstance could not have recorded for the directory name:
// the sweep kills processes and removes links and cgroups by what the file says, so a file
// planted or damaged there must not name the host's own.
func (r Resources) check(name string) error {
	m := instanceName.FindStringSubmatch(name)
	if m == nil {
		return fmt.Errorf("not an instance directory name")
	}
	if r.Bridge != "" && r.Bridge != "brw"+m[2] {
		return fmt.Errorf("bridge %q is not the instance's", r.Bridge)
	}
	if r.CgroupParent != "" && r.CgroupParent != "brewlet-e2e-"+m[2] {
		return fmt.Errorf("cgroup parent %q is not the instance's", r.CgroupParent)
	}
	return nil
}

// Sweep removes instances whose owning test process is gone: what a killed test left.
func Sweep() []error { return sweep(false) }

// SweepAll removes every instance below BaseDir, whether its owner still runs or not
// (`make down` of the local cluster, whose owner exited long ago anyway).
func SweepAll() []error { return sweep(true) }

func sweep(all bool) []error {
	dirs, _ := filepath.Glob(filepath.Join(BaseDir(), "*"))
	var errs []error
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "resources.json"))
		if err != nil {
			continue // not ours, or still being created
		}
		var res Resources
		if json.Unmarshal(b, &res) != nil || res.Owner.PID == 0 {
			continue
		}
		if err := res.check(filepath.Base(dir)); err != nil {
			errs = append(errs, fmt.Errorf("%s: not removed: %w", dir, err))
			continue
		}
		if !all && hostops.Same(res.Owner) {
			continue // its test is still running
		}
		errs = append(errs, removeHostResources(dir, res)...)
	}
	return errs
}

// CheckAlive reports a process recorded for the instance in dir that no longer runs (or an
// instance that was never recorded there).
func CheckAlive(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "resources.json"))
	if err != nil {
		return err
	}
	var res Resources
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	latest := map[string]ProcRecord{} // a restarted component has a newer record
	for _, p := range res.Processes {
		latest[p.Name] = p
	}
	for _, p := range latest {
		if !hostops.Same(p) {
			return fmt.Errorf("%s (pid %d) of %s is gone", p.Name, p.PID, dir)
		}
	}
	return nil
}
