package controlplane

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The rendered chart goes through a real API server: every object validated by
// server-side dry-run (CRDs installed first), then installed and upgraded by helm, the
// chart's provisioner RBAC with its node-scope policy judged for a token bound to a pod on
// node n1, and the operator run under the chart's operator RBAC.
func TestChartOnAPIServer(t *testing.T) {
	framework.Tool(t, "helm")
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{SkipCRDs: true})
	ctx, c := context.Background(), cp.Client
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := cp.Kubectl(t, args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return out
	}
	// CRDs first (helm installs crds/ before the templates), then the rest in the release
	// namespace.
	kubectl("apply", "--server-side", "-f", filepath.Join(kit.ChartDir(t), "crds"))
	kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
	kit.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kit.ChartNS}}))

	dir := t.TempDir()
	for name, args := range map[string][]string{
		"default.yaml": {"--set-json", "provisioner.pools=" + kit.ChartPool},
		"all.yaml": {"--set-json", "provisioner.pools=" + kit.ChartPool, "--set", "metrics.enabled=true",
			"--set", "provisioner.includeControlPlane=true", "--set", "provisioner.registry.credentialsSecret=pull",
			"--set-json", `provisioner.registry.mirrors=[{"registry":"registry.example","mirrors":["m1:5000"]}]`,
			"--set", "operator.image.digest=" + kit.ChartDigest},
		"no-admission.yaml": {"--set-json", "provisioner.pools=" + kit.ChartPool, "--set", "admission.enabled=false"},
	} {
		rc, out, err := kit.ChartTemplate(t, kit.ChartNS, args...)
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, out)
		}
		p := filepath.Join(dir, name)
		kit.Must(t, os.WriteFile(p, []byte(out), 0o600))
		got := kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=helm", "-f", p)
		if n := strings.Count(got, "(server dry run)"); n != len(rc) {
			t.Errorf("%s: %d of %d objects validated by dry run:\n%s", name, n, len(rc), got)
		}
	}
	// Installed for real by helm itself (no controller-manager runs: the workloads stay
	// objects). The CRDs are there already; helm leaves existing CRDs alone.
	helmHome := t.TempDir()
	helm := func(args ...string) string {
		t.Helper()
		out, err := framework.HelmCommand(ctx, t, helmHome, cp.Kubeconfig, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// Metrics on: the operator process below serves them to the scraper's token only.
	helm("install", "brewlet", kit.ChartDir(t), "--namespace", kit.ChartNS, "--set-json", "provisioner.pools="+kit.ChartPool, "--set", "metrics.enabled=true")

	// The nodes and NodeRuntime n2 it creates are the ones the operator then decides for.
	chartAgentUnderRBAC(t, cp)

	t.Run("operator runs under the chart's RBAC", func(t *testing.T) { chartOperatorUnderRBAC(t, cp) })

	// An upgrade keeps the caBundle the operator wrote into its webhook configuration (the
	// chart leaves the field out, so helm's three-way merge does not touch it).
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	kit.Must(t, c.Get(ctx, client.ObjectKey{Name: admission.ConfigurationName}, mwc))
	ca := []byte("-----BEGIN CERTIFICATE-----\nbrewlet test\n-----END CERTIFICATE-----\n")
	mwc.Webhooks[0].ClientConfig.CABundle = ca
	kit.Must(t, c.Update(ctx, mwc))
	helm("upgrade", "brewlet", kit.ChartDir(t), "--namespace", kit.ChartNS, "--set-json", "provisioner.pools="+kit.ChartPool, "--set", "metrics.enabled=true")
	kit.Must(t, c.Get(ctx, client.ObjectKey{Name: admission.ConfigurationName}, mwc))
	if !bytes.Equal(mwc.Webhooks[0].ClientConfig.CABundle, ca) {
		t.Errorf("helm upgrade reset the webhook caBundle to %q", mwc.Webhooks[0].ClientConfig.CABundle)
	}
	kit.Must(t, c.Get(ctx, client.ObjectKey{Namespace: kit.ChartNS, Name: "brewlet-provisioner-metrics"}, &corev1.Service{}))

	chartOperatorCanI(t, cp)
	t.Run("the operator's token one step beyond its job", func(t *testing.T) { chartOperatorAttacks(t, cp) })
	t.Run("only RuntimeClass brewlet uses handler brewlet", func(t *testing.T) { chartRuntimeClassAliases(t, cp) })
	t.Run("a kubelet's credentials one step beyond its job", func(t *testing.T) { chartKubeletAttacks(t, cp) })
	t.Run("a tenant one step beyond its namespace", func(t *testing.T) { chartTenantAttacks(t, cp) })
}
