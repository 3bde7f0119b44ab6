package shim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/containerd/log"

	"brewlet.sh/brewlet/internal/vocab"
)

// profileDir is where creates are profiled (BREWLET_SHIM_PROFILE_DIR), "" when they are not.
func profileDir() string { return os.Getenv(vocab.EnvShimProfileDir) }

// profileMemRate samples allocations finely enough to see one create's few hundred KiB
// (the default samples one allocation per 512 KiB).
const profileMemRate = 4096

// enableAllocProfiling sets the allocation sampling rate for a shim whose creates are
// profiled. It runs once, before the shim serves anything: the rate must not change while
// samples are taken, or the profiles mix scales.
func enableAllocProfiling() {
	if profileDir() != "" {
		runtime.MemProfileRate = profileMemRate
	}
}

// profileCreate profiles one create when the environment asks for it, and returns what
// ends it (call it when the create returns). It writes, into the profile directory:
//
//	create-<id>-<unix nanos>.cpu.pprof           CPU profile of the create
//	create-<id>-<unix nanos>.allocs-before.pprof allocations up to the create
//	create-<id>-<unix nanos>.allocs.pprof        allocations up to its end
//
// The create's own allocations are the difference (go tool pprof -diff_base). A create
// is never failed or slowed by its profile beyond the writing: errors are logged. Only one
// CPU profile runs in a process at a time; a create overlapping another's gets none.
func profileCreate(ctx context.Context, id string) func() {
	dir := profileDir()
	if dir == "" {
		return func() {}
	}
	logf := func(err error) { log.G(ctx).WithError(err).Warn("brewlet: create profile") }
	if err := os.MkdirAll(dir, 0o700); err != nil {
		logf(err)
		return func() {}
	}
	base := filepath.Join(dir, fmt.Sprintf("create-%s-%d", profileName(id), time.Now().UnixNano()))
	if err := writeAllocs(base + ".allocs-before.pprof"); err != nil {
		logf(err)
	}
	cpu, err := os.OpenFile(base+".cpu.pprof", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		if err = pprof.StartCPUProfile(cpu); err != nil {
			_ = cpu.Close()
			_ = os.Remove(cpu.Name())
			cpu = nil
		}
	}
	if err != nil {
		logf(err)
	}
	return func() {
		if cpu != nil {
			pprof.StopCPUProfile()
			if err := cpu.Close(); err != nil {
				logf(err)
			}
		}
		if err := writeAllocs(base + ".allocs.pprof"); err != nil {
			logf(err)
		}
	}
}

// writeAllocs writes the allocation profile as of now. The runtime publishes allocation
// samples at the end of a GC cycle, so one is forced first.
func writeAllocs(file string) error {
	runtime.GC()
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// profileName keeps a container ID usable as part of a file name (containerd's IDs
// already are; anything else is replaced).
func profileName(id string) string {
	if id == "" || len(id) > 128 {
		return "container"
	}
	for _, c := range id {
		if !isNameChar(c) {
			return "container"
		}
	}
	return id
}

func isNameChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}
