// Package agent proves the node agent (the provisioner) end to end: a real control plane,
// a TLS registry with credentials, and containerd with runc where a runtime must run. It
// installs, authorizes and revokes runtimes, wakes on changes, survives stalls and restarts,
// holds pods behind the startup taint, keeps one writer per node and verifies signatures.
// make test runs this package under the race detector in a private mount root.
package agent

import (
	"testing"

	"brewlet.sh/brewlet/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
