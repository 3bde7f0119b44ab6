package controlplane

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// A ValidatingAdmissionPolicy installed by a test is evaluated by the real API server:
// Brewlet's node-scoped writes and restart limits rest on exactly this mechanism.
func TestValidatingAdmissionPolicyEnforced(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	ctx, c := context.Background(), cp.Client
	fail := admissionv1.Fail
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "runtime-registry"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{"node.brewlet.sh"}, APIVersions: []string{"v1alpha1"},
						Resources: []string{"runtimeimages"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: "!object.spec.source.image.startsWith('untrusted.example/')",
				Message:    "runtime images from untrusted.example are not approved here",
			}},
		},
	}
	if err := c.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "runtime-registry"},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	if err := c.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	// The API server picks policies up asynchronously (about a second).
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Create(ctx, kit.RuntimeImage("denied", "untrusted.example/python@"+kit.GoodDigest))
		if err != nil && strings.Contains(err.Error(), "not approved here") {
			break
		}
		if err == nil {
			_ = c.Delete(ctx, kit.RuntimeImage("denied", ""))
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy not enforced after 30s; last result: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := c.Create(ctx, kit.RuntimeImage("allowed", "trusted.example/python@"+kit.GoodDigest)); err != nil {
		t.Fatalf("policy refused an allowed object: %v", err)
	}
}
