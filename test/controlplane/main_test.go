// Package controlplane proves Brewlet's API behaviour on a real etcd and kube-apiserver
// (and a kube-controller-manager or kwok where rollouts need one): the CRDs' validation, the
// operator's controllers run in process or as a process with the chart's identity, the
// chart's admission policies and RBAC under attack, pod admission, metrics, rotation restarts
// and node retirement. It starts no containerd: nodes here are API objects.
package controlplane

import (
	"testing"

	"brewlet.sh/brewlet/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
