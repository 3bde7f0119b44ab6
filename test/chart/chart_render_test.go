package chart

import (
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// chartPools are the values flags of a render the chart accepts (it refuses one without
// pools), followed by extra.
func chartPools(extra ...string) []string {
	return append([]string{"--set-json", "provisioner.pools=" + kit.ChartPool}, extra...)
}

// chartPolicyFromConfig reads the policy and binding named name from config/policy/file.
func chartPolicyFromConfig(t *testing.T, file, name string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(t), "config", "policy", file))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := kit.ChartSplit(b)
	if err != nil {
		t.Fatal(err)
	}
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	rc.Decode(t, "ValidatingAdmissionPolicy", name, vap)
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	rc.Decode(t, "ValidatingAdmissionPolicyBinding", name, binding)
	return vap, binding
}
