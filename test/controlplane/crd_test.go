package controlplane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

func TestCRDValidation(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	ctx, c := context.Background(), cp.Client

	t.Run("RuntimeImage source must be digest-pinned", func(t *testing.T) {
		for _, img := range []string{
			"registry.example/python:3.12",
			"registry.example/python:3.12@" + kit.GoodDigest,
			"python@" + kit.GoodDigest, // no registry
			"registry.example/python@sha256:ABCDEF",
			"registry.example/python@sha256:" + strings.Repeat("A", 64),
			"registry.example/python",
		} {
			err := c.Create(ctx, kit.RuntimeImage("python-3.12", img))
			kit.ExpectDenied(t, err, "pin the image by digest")
		}
	})

	t.Run("RuntimeImage verification names someone, and each keyless identity one subject", func(t *testing.T) {
		with := func(name string, v *brewletv1.Verification) *brewletv1.RuntimeImage {
			ri := kit.RuntimeImage(name, "registry.example/py@"+kit.GoodDigest)
			ri.Spec.Verification = v
			return ri
		}
		const issuer = "https://token.actions.githubusercontent.com"
		kit.ExpectDenied(t, c.Create(ctx, with("v-empty", &brewletv1.Verification{})), "names no public key and no keyless identity")
		kit.ExpectDenied(t, c.Create(ctx, with("v-both", &brewletv1.Verification{Keyless: []brewletv1.KeylessIdentity{{Issuer: issuer, Subject: "a", SubjectRegExp: "b"}}})), "exactly one of subject and subjectRegExp")
		kit.ExpectDenied(t, c.Create(ctx, with("v-neither", &brewletv1.Verification{Keyless: []brewletv1.KeylessIdentity{{Issuer: issuer}}})), "exactly one of subject and subjectRegExp")
		nine := make([]string, 9)
		kit.ExpectDenied(t, c.Create(ctx, with("v-nine", &brewletv1.Verification{PublicKeys: nine})), "must have at most 8 items")
		if err := c.Create(ctx, with("v-keyless", &brewletv1.Verification{Keyless: []brewletv1.KeylessIdentity{{Issuer: issuer, SubjectRegExp: "^https://github.com/example/"}}})); err != nil {
			t.Fatalf("a keyless identity refused: %v", err)
		}
	})

	t.Run("RuntimeImage accepts only a digest as breaking its promise", func(t *testing.T) {
		with := func(name, accept string) *brewletv1.RuntimeImage {
			ri := kit.RuntimeImage(name, "registry.example/py@"+kit.GoodDigest)
			ri.Spec.Compatibility = &brewletv1.Compatibility{AcceptBreaking: accept}
			return ri
		}
		for _, bad := range []string{"latest", "registry.example/py@" + kit.GoodDigest, "sha256:ABCDEF", "sha512:" + strings.Repeat("a", 64)} {
			kit.ExpectDenied(t, c.Create(ctx, with("accept-bad", bad)), "should match")
		}
		if err := c.Create(ctx, with("accept-digest", kit.GoodDigest)); err != nil {
			t.Fatalf("a digest accepted as breaking refused: %v", err)
		}
	})

	t.Run("RuntimeImage name is a runtime ID", func(t *testing.T) {
		kit.ExpectDenied(t, c.Create(ctx, kit.RuntimeImage(strings.Repeat("a", 56), "registry.example/py@"+kit.GoodDigest)), "at most 55 characters")
		// Kubernetes' own name rules already refuse '@', ':' and '/'; a name with
		// uppercase letters never reaches CEL either. An ID at the limit is accepted.
		ok := kit.RuntimeImage(strings.Repeat("a", 55), "registry.example/py@"+kit.GoodDigest)
		if err := c.Create(ctx, ok); err != nil {
			t.Fatalf("55-character ID refused: %v", err)
		}
	})

	t.Run("RuntimeImage accepted, status subresource, user immutable", func(t *testing.T) {
		ri := kit.RuntimeImage("python-3.12", "127.0.0.1:5000/runtimes/python@"+kit.GoodDigest)
		if err := c.Create(ctx, ri); err != nil {
			t.Fatalf("valid RuntimeImage refused: %v", err)
		}
		// The status is the operator's: it writes it through the status subresource.
		kit.StartOperator(t, cp, false)
		kit.WaitGeneration(t, c, ri, 1)
		got := &brewletv1.RuntimeImage{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(ri), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Generation != 1 || got.Status.Epoch != ri.UID {
			t.Fatalf("status not stored: %+v", got.Status)
		}
		// Status writes through the main resource are ignored (status subresource).
		got.Status.Generation = 7
		got.Spec.Description = "CPython 3.12 on Debian"
		if err := c.Update(ctx, got); err != nil {
			t.Fatalf("spec update: %v", err)
		}
		if got.Status.Generation != 1 {
			t.Fatalf("a spec update changed status.generation to %d", got.Status.Generation)
		}
		// The operator records each spec change in the status: start from the latest version.
		fresh := func() *brewletv1.RuntimeImage {
			if err := c.Get(ctx, client.ObjectKeyFromObject(ri), got); err != nil {
				t.Fatal(err)
			}
			return got
		}
		kit.Eventually(t, 30*time.Second, "the operator observed the spec change", func() (bool, string) {
			g := fresh()
			return g.Status.ObservedGeneration == g.Generation, fmt.Sprintf("observed %d of %d", g.Status.ObservedGeneration, g.Generation)
		})
		fresh().Spec.User.UID = 0
		kit.ExpectDenied(t, c.Update(ctx, got), "") // uid 0 is below the minimum
		fresh().Spec.User.UID = 20000
		kit.ExpectDenied(t, c.Update(ctx, got), "spec.user is immutable")
		// Printer columns come from the generated CRD.
		out, err := cp.Kubectl(t, "get", "runtimeimages.node.brewlet.sh", "python-3.12")
		if err != nil || !strings.Contains(out, "GENERATION") || !strings.Contains(out, "APPROVED") {
			t.Fatalf("kubectl get runtimeimages: %v\n%s", err, out)
		}
		out, err = cp.Kubectl(t, "get", "ri", "python-3.12",
			`-o=jsonpath={.status.conditions[?(@.type=="Approved")].status}`)
		if err != nil || strings.TrimSpace(out) != "True" {
			t.Fatalf("short name ri: %v %q", err, out)
		}
	})

	t.Run("NodeProfile defaults; idleTTL is not an accepted field", func(t *testing.T) {
		np := &brewletv1.NodeProfile{
			ObjectMeta: metav1.ObjectMeta{Name: "general"},
			Spec: brewletv1.NodeProfileSpec{
				NodePool:      brewletv1.NodePool{Key: "node-restriction.kubernetes.io/pool", Names: []string{"general"}},
				RuntimeImages: []brewletv1.OfferedRuntime{{ID: "python-3.12"}},
			},
		}
		if err := c.Create(ctx, np); err != nil {
			t.Fatalf("valid NodeProfile refused: %v", err)
		}
		if np.Spec.RuntimeImages[0].Install != "Eager" || np.Spec.ContainerdRestart != "validated" {
			t.Fatalf("defaults not applied: install=%q containerdRestart=%q", np.Spec.RuntimeImages[0].Install, np.Spec.ContainerdRestart)
		}
		bad := np.DeepCopy()
		bad.ResourceVersion, bad.Name = "", "bad"
		bad.Spec.RuntimeImages[0].Install = "Lazy"
		kit.ExpectDenied(t, c.Create(ctx, bad), "Unsupported value")
		// idleTTL is not implemented, so the API does not pretend to accept it: with strict
		// field validation (kubectl's default) the manifest is refused, not silently pruned.
		idle := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": brewletv1.GroupVersion.String(), "kind": "NodeProfile", "metadata": map[string]any{"name": "idle"},
			"spec": map[string]any{"nodePool": map[string]any{"key": "node-restriction.kubernetes.io/pool", "names": []any{"general"}},
				"runtimeImages": []any{map[string]any{"id": "python-3.12", "install": "OnDemand", "idleTTL": "1h"}}}}}
		kit.ExpectDenied(t, c.Create(ctx, idle, client.FieldValidation("Strict")), `unknown field "spec.runtimeImages[0].idleTTL"`)
	})

	t.Run("NodeRetirementEvidence is immutable", func(t *testing.T) {
		nre := &brewletv1.NodeRetirementEvidence{
			ObjectMeta: metav1.ObjectMeta{Name: "n1-retired"},
			Spec: brewletv1.NodeRetirementEvidenceSpec{NodeName: "n1", NodeUID: "8c1f0a4e-0000-4000-8000-000000000001",
				InstanceID: "i-0abc", RetiredAt: metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second)),
				EvidenceRef: "TICKET-42"},
		}
		if err := c.Create(ctx, nre); err != nil {
			t.Fatalf("NodeRetirementEvidence refused: %v", err)
		}
		nre.Spec.InstanceID = "i-other"
		kit.ExpectDenied(t, c.Update(ctx, nre), "NodeRetirementEvidence is immutable")
	})

	t.Run("NodeRuntime status subresource", func(t *testing.T) {
		nrt := &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		if err := c.Create(ctx, nrt); err != nil {
			t.Fatal(err)
		}
		nrt.Status.Complete = true
		nrt.Status.Runtimes = []brewletv1.NodeRuntimeEntry{{ID: "python-3.12", State: "Ready", Generation: 1}}
		if err := c.Status().Update(ctx, nrt); err != nil {
			t.Fatalf("status update: %v", err)
		}
		nrt.Status.Runtimes[0].State = "Happy"
		kit.ExpectDenied(t, c.Status().Update(ctx, nrt), "Unsupported value")
	})
}
