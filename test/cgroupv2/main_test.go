// Package cgroupv2 proves the node on cgroup v2, the hierarchy every current node image
// boots with, where this machine's own controllers are bound to v1. It boots a Debian kernel
// with only the unified hierarchy (cgroup_no_v1=all) in a qemu guest under software
// emulation, its root filesystem made with debootstrap (hack/guest.sh, cached with the other
// tools), and runs a selection of the node tier inside: containerd, runc, the shim, a TLS
// registry with credentials and the runtime installer, with the test binaries and tools built
// on the host and shared over 9p. Nothing of the machine changes: the guest's disk is a
// snapshot of the cached image, and the guest has no network.
package cgroupv2

import (
	"testing"

	"brewlet.sh/brewlet/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
