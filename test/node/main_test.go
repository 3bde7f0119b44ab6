// Package node proves the node without Kubernetes: containerd, runc, the shim and a TLS
// registry with credentials. It covers the data path (runtime and /app composed at start),
// the confinement of the spec, seccomp and SELinux, containerd versions and layouts, runtime
// installs from registries, mirrors and proxies, the CLI, the component images and cleanup.
package node

import (
	"testing"

	"brewlet.sh/brewlet/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
