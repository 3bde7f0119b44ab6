// Package e2e holds Brewlet's tests against real components: etcd and kube-apiserver for
// API behaviour, containerd, runc and an OCI registry for node behaviour.
package e2e

import (
	"testing"

	"brewlet.sh/brewlet/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
