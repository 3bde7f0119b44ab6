package shim

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/manager"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// hostMarker is a file in the container's bundle recording where the node's Brewlet state
// lives. containerd runs the `delete` action of a shim that died without the environment it
// started the shim with, so that action finds the state through the bundle instead.
const hostMarker = "brewlet-host"

// NewManager is containerd's runc shim manager whose Stop (the `delete` action containerd
// runs after a shim died) also releases the container's lease and exec state, once runc
// has deleted the container and its root filesystem is unmounted.
func NewManager(name string) shim.Shim {
	return &shimManager{Shim: manager.NewShimManager(name)}
}

type shimManager struct{ shim.Shim }

func (m *shimManager) Stop(ctx context.Context, id string) (shim.StopStatus, error) {
	bundle := bundleOf(id)
	st, done := deletedStop(ctx, bundle, id)
	if !done {
		var err error
		if st, err = m.Shim.Stop(ctx, id); err != nil {
			return st, err
		}
	}
	l, ok := markedLayout(bundle)
	if !ok {
		return st, nil // a sandbox, or not a container this shim composed
	}
	if err := releaseContainer(l, bundle, id); err != nil {
		log.G(ctx).WithError(err).Warn("brewlet: lease kept after delete of a dead shim's container; GC keeps its generation")
	}
	return st, nil
}

// bundleOf is a container's bundle directory. A shim runs in the bundle of the task it was
// started for, and containerd keeps every bundle of a namespace side by side; the runc
// manager finds bundles the same way.
func bundleOf(id string) string {
	cwd, err := os.Getwd()
	if err != nil {
		return filepath.Join("/nonexistent", id)
	}
	return filepath.Join(filepath.Dir(cwd), id)
}

// markBundle records the node's state location in the bundle (see hostMarker).
func markBundle(bundle string) error {
	return os.WriteFile(filepath.Join(bundle, hostMarker), []byte(os.Getenv(vocab.EnvHostPrefix)), 0o600)
}

// markedLayout reads the bundle's marker: an empty marker is the default layout, an
// unreadable or non-absolute one means the bundle is not one this shim composed.
func markedLayout(bundle string) (hoststate.Layout, bool) {
	b, err := os.ReadFile(filepath.Join(bundle, hostMarker))
	if err != nil || len(b) > 4096 {
		return hoststate.Layout{}, false
	}
	p := strings.TrimSpace(string(b))
	if p == "" {
		return hoststate.DefaultLayout, true
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return hoststate.Layout{}, false
	}
	return hoststate.Under(p), true
}

// releaseContainer drops the container's lease and exec state once its root filesystem is
// no longer mounted; while it still is, the lease stays so GC keeps the generation.
func releaseContainer(l hoststate.Layout, bundle, id string) error {
	unmapLayers(l.IDMapDir(id), nil) // what a shim that died while mounting left
	if _, err := os.Stat(l.ContainerDir(id)); err != nil {
		return nil // nothing recorded, or already released
	}
	if mounted(filepath.Join(bundle, "rootfs")) {
		return &os.PathError{Op: "release lease", Path: filepath.Join(bundle, "rootfs"), Err: unix.EBUSY}
	}
	if err := l.ReleaseLease(id); err != nil {
		return err
	}
	return os.RemoveAll(l.ContainerDir(id))
}

// mounted reports whether dir is a mount point (a different device than its parent). A
// directory that no longer exists is not mounted.
func mounted(dir string) bool {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return true
	}
	return st.Dev != parent.Dev
}
