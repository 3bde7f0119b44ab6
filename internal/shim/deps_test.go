package shim

import (
	"os/exec"
	"strings"
	"testing"
)

// The shim is resident once per pod: every package it links adds its package-level state
// to each pod's memory. Kubernetes' packages have no job in it (their validation package
// alone allocated 80 KiB at start).
func TestShimLinksNoKubernetesPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "brewlet.sh/brewlet/cmd/containerd-shim-brewlet-v2").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/") {
			t.Errorf("the shim links %s; keep Kubernetes' packages out of what cmd/containerd-shim-brewlet-v2 imports", p)
		}
	}
}
