package shim

import (
	"os"
	"path/filepath"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// hostFacts is what the confinement rules need to know about the node, gathered by the
// caller so that the rules stay pure.
type hostFacts struct {
	// deviceGroups maps a non-root group ID to a device node it can read or write.
	deviceGroups map[uint32]string
	// hostNamespace reports whether a namespace path (e.g. /proc/123/ns/net) is the node's
	// own namespace of that type.
	hostNamespace func(nsType specs.LinuxNamespaceType, path string) bool
}

// Bounds of the /dev scan: device trees are shallow and small; a node with more is odd
// enough that the scan stops rather than stalling a container start.
const (
	devScanDepth   = 3
	devScanEntries = 20000
)

// nsProcName maps OCI namespace types to their /proc/<pid>/ns names.
var nsProcName = map[specs.LinuxNamespaceType]string{
	specs.PIDNamespace: "pid", specs.NetworkNamespace: "net", specs.IPCNamespace: "ipc",
	specs.UTSNamespace: "uts", specs.MountNamespace: "mnt", specs.UserNamespace: "user",
	specs.CgroupNamespace: "cgroup", specs.TimeNamespace: "time",
}

var (
	devGroupsOnce sync.Once
	devGroups     map[uint32]string
)

// readHostFacts gathers what checkSpec needs from the node. The device scan runs once per
// shim process (one shim serves a pod), since host device nodes do not change groups while
// a pod starts its containers.
func readHostFacts(devRoot string) hostFacts {
	devGroupsOnce.Do(func() { devGroups = deviceGroups(devRoot) })
	return hostFacts{deviceGroups: devGroups, hostNamespace: isHostNamespace}
}

// deviceGroups maps every non-root group that can read or write a character or block
// device under root to one such device.
func deviceGroups(root string) map[uint32]string {
	out := map[uint32]string{}
	seen := 0
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			if seen++; seen > devScanEntries {
				return
			}
			p := filepath.Join(dir, e.Name())
			if e.IsDir() {
				if depth < devScanDepth {
					walk(p, depth+1)
				}
				continue
			}
			var st unix.Stat_t
			if unix.Lstat(p, &st) != nil {
				continue
			}
			kind := st.Mode & unix.S_IFMT
			if (kind == unix.S_IFCHR || kind == unix.S_IFBLK) && st.Gid != 0 && st.Mode&0o060 != 0 {
				if _, ok := out[st.Gid]; !ok {
					out[st.Gid] = p
				}
			}
		}
	}
	walk(root, 0)
	return out
}

// isHostNamespace compares a namespace file with the node's namespaces of the same type:
// the shim's own (containerd starts shims in the node's namespaces) and, where this
// process may look, the init process's. A namespace that cannot be inspected counts as the
// node's: fail closed.
func isHostNamespace(t specs.LinuxNamespaceType, path string) bool {
	name, ok := nsProcName[t]
	if !ok {
		return false
	}
	var ns unix.Stat_t
	if unix.Stat(path, &ns) != nil {
		return true
	}
	for _, ref := range []string{"/proc/self/ns", "/proc/1/ns"} {
		var host unix.Stat_t
		if unix.Stat(filepath.Join(ref, name), &host) == nil && host.Dev == ns.Dev && host.Ino == ns.Ino {
			return true
		}
	}
	return false
}
