package shim

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/core/mount"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/vocab"
)

// A user-namespaced container sees its layers through idmapped mounts: files owned by the
// node's IDs appear as the pod's. containerd maps an overlay's lower directories by mapping
// their longest common parent, recursively — for a Brewlet root (runtime layers under
// /var/lib/brewlet, snapshots under /var/lib/containerd) that is /var/lib and every mount
// below it, or "/", an error. The shim maps each lower directory on its own instead, not
// what is mounted below it, attached in a directory of the container's own only while the
// overlay is mounted: no other directory is ever mapped (docs/shim.md, "User namespaces").

// maxIDMappings bounds a user namespace's mapping lines (the kernel allows 340; the kubelet
// writes one).
const maxIDMappings = 16

// usernsOf returns the container's user namespace mappings, or ok false when it shares the
// node's user namespace.
func usernsOf(s *specs.Spec) (uid, gid []specs.LinuxIDMapping, ok bool, err error) {
	if !slices.ContainsFunc(s.Linux.Namespaces, func(ns specs.LinuxNamespace) bool { return ns.Type == specs.UserNamespace }) {
		if len(s.Linux.UIDMappings)+len(s.Linux.GIDMappings) > 0 {
			return nil, nil, false, usernsErr("the spec maps IDs but has no user namespace")
		}
		return nil, nil, false, nil
	}
	for _, m := range [][]specs.LinuxIDMapping{s.Linux.UIDMappings, s.Linux.GIDMappings} {
		if len(m) == 0 || len(m) > maxIDMappings {
			return nil, nil, false, usernsErr("the user namespace has %d ID mapping lines; Brewlet maps its layers from 1 to %d (the kubelet's hostUsers: false gives one)", len(m), maxIDMappings)
		}
		for _, l := range m {
			if l.Size == 0 || uint64(l.ContainerID)+uint64(l.Size) > math.MaxUint32 || uint64(l.HostID)+uint64(l.Size) > math.MaxUint32 {
				return nil, nil, false, usernsErr("the ID mapping %d:%d:%d is empty or runs past the last ID", l.ContainerID, l.HostID, l.Size)
			}
		}
	}
	return s.Linux.UIDMappings, s.Linux.GIDMappings, true, nil
}

func usernsErr(format string, args ...any) error {
	return vocab.Errorf(vocab.ReasonUserNamespaceUnsupported, "user namespace: "+format, args...)
}

// mapsID reports whether a container-side ID is inside the mappings: a process running as
// an unmapped ID would own nothing it creates.
func mapsID(m []specs.LinuxIDMapping, id uint32) bool {
	return slices.ContainsFunc(m, func(l specs.LinuxIDMapping) bool {
		return id >= l.ContainerID && uint64(id) < uint64(l.ContainerID)+uint64(l.Size)
	})
}

// mappingOption is a mapping in the form containerd's overlay options use
// ("container:host:size", comma-separated).
func mappingOption(m []specs.LinuxIDMapping) string {
	parts := make([]string, len(m))
	for i, l := range m {
		parts[i] = fmt.Sprintf("%d:%d:%d", l.ContainerID, l.HostID, l.Size)
	}
	return strings.Join(parts, ",")
}

// snapshotMapping takes containerd's uidmap= and gidmap= options off the overlay mount and
// reports whether the snapshotter asked for its layers to be mapped. A mapping that is not
// the container's own is refused: the layers would show another pod's IDs.
func snapshotMapping(m *types.Mount, uid, gid []specs.LinuxIDMapping) (bool, error) {
	var u, g string
	present := false
	kept := m.Options[:0:0]
	for _, o := range m.Options {
		if v, ok := strings.CutPrefix(o, "uidmap="); ok {
			u, present = v, true
		} else if v, ok := strings.CutPrefix(o, "gidmap="); ok {
			g, present = v, true
		} else {
			kept = append(kept, o)
		}
	}
	if !present {
		return false, nil
	}
	if u != mappingOption(uid) || g != mappingOption(gid) {
		return false, usernsErr("containerd's snapshot is mapped uid %q gid %q, the container's user namespace uid %q gid %q", u, g, mappingOption(uid), mappingOption(gid))
	}
	m.Options = kept
	return true, nil
}

// mapLayers maps the composed overlay's lower directories into the container's user
// namespace, if it has one (the mounts below dir, for the moment of the overlay's mount): the runtime's layers and the /app mask always (they are the
// node's files), the application's layers when containerd's snapshotter asked for them to be
// mapped (a snapshotter that copied and chowned them instead needs no mapping). appLayers is
// how many of the top lower directories are the application's.
func mapLayers(m *types.Mount, s *specs.Spec, appLayers int, dir string) (func(), error) {
	uid, gid, ok, err := usernsOf(s)
	if err != nil || !ok {
		return func() {}, err
	}
	if err := userInNamespace(s); err != nil {
		return nil, err
	}
	appMapped, err := snapshotMapping(m, uid, gid)
	if err != nil {
		return nil, err
	}
	return idmapLowerdirs(m, uid, gid, dir, func(i int, _ string) bool { return i >= appLayers || appMapped })
}

// userInNamespace refuses a process whose user or groups the pod's user namespace does not
// map: it would own nothing it creates, and runc fails late on it.
func userInNamespace(s *specs.Spec) error {
	uid, gid := s.Linux.UIDMappings, s.Linux.GIDMappings
	u := s.Process.User
	unmapped := func(g uint32) bool { return !mapsID(gid, g) }
	if !mapsID(uid, u.UID) || unmapped(u.GID) || slices.ContainsFunc(u.AdditionalGids, unmapped) {
		return usernsErr("the process runs as %d:%d (groups %v), outside the pod's user namespace (uid %s, gid %s); give the pod's user namespace the runtime's user, or run it with hostUsers: true", u.UID, u.GID, u.AdditionalGids, mappingOption(uid), mappingOption(gid))
	}
	return nil
}

// lowerdirs returns the overlay's lower directories, top first.
func lowerdirs(m *types.Mount) []string {
	for _, o := range m.Options {
		if v, ok := strings.CutPrefix(o, "lowerdir="); ok {
			return strings.Split(v, ":")
		}
	}
	return nil
}

func setLowerdirs(m *types.Mount, dirs []string) {
	for i, o := range m.Options {
		if strings.HasPrefix(o, "lowerdir=") {
			m.Options[i] = "lowerdir=" + strings.Join(dirs, ":")
		}
	}
}

// idmapLowerdirs replaces each lower directory chosen by mapDir with an idmapped mount of
// it alone, attached below dir (a directory of the container's own) for the moment the
// overlay is mounted. The returned function detaches them once the overlay is mounted (or
// the create failed): the overlay keeps what it uses. Kernels before 6.x reject an overlay
// layer on a mount attached nowhere, so the clones are attached, never to a shared path.
func idmapLowerdirs(m *types.Mount, uid, gid []specs.LinuxIDMapping, dir string, mapDir func(i int, dir string) bool) (func(), error) {
	userns, err := mount.GetUsernsFD(mappingOption(uid), mappingOption(gid))
	if err != nil {
		return nil, usernsErr("cannot create a user namespace with the pod's mappings to map the layers: %v", err)
	}
	defer func() { _ = userns.Close() }()
	var targets []string
	detach := func() { unmapLayers(dir, targets) }
	dirs := lowerdirs(m)
	for i, d := range dirs {
		if !mapDir(i, d) {
			continue
		}
		target := filepath.Join(dir, strconv.Itoa(i))
		if err := attachIDMapped(d, target, int(userns.Fd())); err != nil {
			detach()
			return nil, usernsErr("cannot map layer %s into the pod's user namespace (%v): the node's kernel or filesystem does not support idmapped mounts there; run the pod with hostUsers: true or on nodes that support them", d, err)
		}
		targets = append(targets, target)
		dirs[i] = target
	}
	setLowerdirs(m, dirs)
	return detach, nil
}

// attachIDMapped mounts an idmapped, read-only clone of dir alone at target.
func attachIDMapped(dir, target string, usernsFD int) error {
	if err := os.MkdirAll(target, 0o700); err != nil {
		return err
	}
	fd, err := idmapped(dir, usernsFD)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return os.NewSyscallError("move_mount", err)
	}
	return nil
}

// unmapLayers detaches the idmapped layers below dir (targets, or every entry when nil: what
// a crashed shim left) and removes the directory. Best effort: an entry still mounted stays.
func unmapLayers(dir string, targets []string) {
	if targets == nil {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			targets = append(targets, filepath.Join(dir, e.Name()))
		}
	}
	for _, t := range targets {
		_ = unix.Unmount(t, unix.MNT_DETACH)
		_ = os.Remove(t)
	}
	_ = os.Remove(dir)
}

// idmapped clones dir (not what is mounted below it) into a detached, read-only mount
// mapped through the user namespace usernsFD, and returns its descriptor.
func idmapped(dir string, usernsFD int) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, os.NewSyscallError("open_tree", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(usernsFD)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		_ = unix.Close(fd)
		return -1, os.NewSyscallError("mount_setattr", err)
	}
	return fd, nil
}
