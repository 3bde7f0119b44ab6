package shim

import (
	"os/exec"
	"strings"
	"testing"
)

// The shim is resident once per pod: every package it links adds its package-level state
// to each pod's memory, and what it first uses builds tables it keeps for the pod's life.
func TestShimLinksNoHeavyPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "brewlet.sh/brewlet/cmd/containerd-shim-brewlet-v2").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []struct{ prefix, why string }{
		// Their validation package alone allocated 80 KiB at start.
		{"k8s.io/", "Kubernetes' packages have no job in the shim"},
		{"sigs.k8s.io/", "Kubernetes' packages have no job in the shim"},
		// Each service's descriptors at start, message tables at first use (containerdapi.go).
		{"github.com/containerd/containerd/api/services/containers/", "read the container record with containerdapi.go"},
		{"github.com/containerd/containerd/api/services/images/", "read the image record with containerdapi.go"},
		{"github.com/containerd/containerd/api/services/content/", "read blobs with containerdapi.go"},
	}
	for _, p := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(p, f.prefix) {
				t.Errorf("the shim links %s: %s; keep it out of what cmd/containerd-shim-brewlet-v2 imports", p, f.why)
			}
		}
	}
}
