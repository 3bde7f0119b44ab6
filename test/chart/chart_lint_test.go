package chart

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

func TestChartLint(t *testing.T) {
	helm, dir := framework.Tool(t, "helm"), kit.ChartDir(t)
	for _, args := range [][]string{
		{"lint", dir},
		{"lint", "--strict", dir, "--set-json", "provisioner.pools=" + kit.ChartPool},
		{"lint", "--strict", dir, "--set-json", "provisioner.pools=" + kit.ChartPool, "--set", "metrics.enabled=true",
			"--set", "admission.enabled=false", "--set", "provisioner.includeControlPlane=true"},
		// helm lint announces no kinds: the restarts policy is rendered with
		// requireAdmissionPolicy=false only.
		{"lint", "--strict", dir, "--set-json", "provisioner.pools=" + kit.ChartPool, "--set", "operator.rotationRestarts.enabled=true",
			"--set", "operator.rotationRestarts.requireAdmissionPolicy=false"},
		{"lint", "--strict", dir, "--set-json", "provisioner.pools=" + kit.ChartPool, "--set", "operator.rotationRestarts.enabled=true",
			"--set", "operator.rotationRestarts.requireAdmissionPolicy=false", "--set-json", `operator.rotationRestarts.namespaces=["a","b"]`},
	} {
		if out, err := exec.Command(helm, args...).CombinedOutput(); err != nil {
			t.Errorf("helm %v: %v\n%s", args, err, out)
		}
	}
}

// The CRDs the chart installs are the generated ones, byte for byte (make generate copies
// them; this test catches a copy that was forgotten).
func TestChartCRDsMatchGenerated(t *testing.T) {
	root := framework.RepoRoot(t)
	gen, err := filepath.Glob(filepath.Join(root, "config", "crd", "*.yaml"))
	if err != nil || len(gen) == 0 {
		t.Fatalf("no generated CRDs: %v", err)
	}
	inChart, _ := filepath.Glob(filepath.Join(kit.ChartDir(t), "crds", "*.yaml"))
	base := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if !slices.Equal(base(gen), base(inChart)) {
		t.Fatalf("charts/brewlet/crds holds %v, config/crd holds %v: run 'make generate'", base(inChart), base(gen))
	}
	for _, p := range gen {
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(kit.ChartDir(t), "crds", filepath.Base(p)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("charts/brewlet/crds/%s differs from config/crd (run 'make generate'): %v", filepath.Base(p), err)
		}
	}
}
