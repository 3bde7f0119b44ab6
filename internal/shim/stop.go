package shim

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/process"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/runc"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/identifiers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
)

// deletedStop answers containerd's `delete` action for a container the shim already deleted,
// without running runc. containerd runs that action after every shim exit, a clean one
// included, and a CRI StopContainer returns only once it is done; the runc manager's answer
// always starts with `runc delete --force`, which for a deleted container finds nothing and
// costs an exec of runc on every stop (about a third of the action).
//
// It answers only when that runc call could not have done anything: the runtime is runc,
// runc keeps no directory for the container under its root (runc removes exactly that
// directory, and nothing else, when the container does not exist), the root filesystem is
// unmounted, and the shim recorded the exit. Anything else — a shim that died with its
// container running, a runc that died during create, another runtime binary — gets the
// runc manager's full answer.
func deletedStop(ctx context.Context, bundle, id string) (shim.StopStatus, bool) {
	dir, ok := runcStateDir(ctx, bundle, id)
	if !ok {
		return shim.StopStatus{}, false
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		return shim.StopStatus{}, false
	}
	if err := mount.UnmountRecursive(filepath.Join(bundle, "rootfs"), 0); err != nil {
		return shim.StopStatus{}, false
	}
	e, err := runc.ReadExitStatus(bundle)
	if err != nil {
		return shim.StopStatus{}, false
	}
	return shim.StopStatus{ExitedAt: e.Timestamp, ExitStatus: e.Status, Pid: e.Pid}, true
}

// runcStateDir is the directory runc keeps for container id of bundle, as the runc shim
// configures runc (its root option, else the default, then the namespace); false when the
// bundle's runtime is not runc or the names could leave that root.
func runcStateDir(ctx context.Context, bundle, id string) (string, bool) {
	// Both validated as containerd validates them (letters, digits and . _ -, starting
	// with a letter or digit): neither can leave runc's root.
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil || identifiers.Validate(id) != nil {
		return "", false
	}
	rt, err := runc.ReadRuntime(bundle)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if rt != "" && filepath.Base(rt) != "runc" {
		return "", false
	}
	opts, err := runc.ReadOptions(bundle)
	if err != nil {
		return "", false
	}
	root := process.RuncRoot
	if opts != nil && opts.Root != "" {
		root = opts.Root
	}
	return filepath.Join(root, ns, id), true
}
