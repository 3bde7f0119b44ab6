// Package kubelet proves Brewlet on real kubelet nodes: a control plane with
// kube-controller-manager and scheduler, kubelets over containerd and runc, the chart
// installed with helm, the first-hour walk-through, a rotation across two nodes and a
// kubelet killed mid-test swept on the next run.
package kubelet

import (
	"testing"

	"brewlet.sh/brewlet/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
