package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"brewlet.sh/brewlet/internal/signature"
	"brewlet.sh/brewlet/internal/testutil/fulciotest"
	"brewlet.sh/brewlet/test/kit"
)

// chartTestKey is an ECDSA P-256 public key for rendering tests (no private key exists).
const chartTestKey = `-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE6ZR2N2XhXbVrn7tcEHvhccBqu57x
tDEgkKLHhaFdjES/m0g38dVm4QLO8Xw+MmGsSWl7S5PL+ruFdYmiJyWo9Q==
-----END PUBLIC KEY-----
`

func chartQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// chartTrustedRoot writes a Sigstore trusted root (of a test CA) and returns its path.
func chartTrustedRoot(t *testing.T) string {
	t.Helper()
	ca, err := fulciotest.New()
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.TrustedRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "trusted_root.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// chartCheckSignatureKeys: verification.publicKeys reach both components from one
// ConfigMap, read-only; brewlet-operator also gets the registry CA bundle, the pull
// credentials and the plain-HTTP switch the agents have, to read signatures.
func chartCheckSignatureKeys(t *testing.T, rc kit.ChartObjects, dep *appsv1.Deployment, ds *appsv1.DaemonSet) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	rc.Decode(t, "ConfigMap", "brewlet-signature-keys", cm)
	if strings.TrimSpace(cm.Data["keys.pem"]) != strings.TrimSpace(chartTestKey) {
		t.Errorf("keys.pem %q, want the key given", cm.Data["keys.pem"])
	}
	if _, err := signature.ParseTrustedRoot([]byte(cm.Data["trusted_root.json"])); err != nil {
		t.Errorf("trusted_root.json: %v", err)
	}
	// The identities file is what the components read: written and read back as they do.
	dir := t.TempDir()
	for name, body := range map[string]string{"identities.json": cm.Data["identities.json"], "trusted_root.json": cm.Data["trusted_root.json"]} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if r, _, err := signature.LoadCluster("", filepath.Join(dir, "identities.json"), filepath.Join(dir, "trusted_root.json")); err != nil || len(r.Identities) != 1 {
		t.Errorf("identities.json %q: %+v %v", cm.Data["identities.json"], r, err)
	}
	oc, pc := dep.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[0]
	for _, pod := range []struct {
		c    corev1.Container
		spec corev1.PodSpec
	}{{oc, dep.Spec.Template.Spec}, {pc, ds.Spec.Template.Spec}} {
		chartWantArg(t, pod.c, "--signature-keys", "/etc/brewlet/signature-keys/keys.pem")
		chartWantArg(t, pod.c, "--signature-trusted-root", "/etc/brewlet/signature-keys/trusted_root.json")
		chartWantArg(t, pod.c, "--signature-identities", "/etc/brewlet/signature-keys/identities.json")
		chartWantArg(t, pod.c, "--registry-ca-file", "/etc/brewlet/registry-ca/ca.crt")
		chartWantArg(t, pod.c, "--insecure-registries", "")
		if v, _ := chartEnv(pod.c, "DOCKER_CONFIG"); v != "/var/run/brewlet/registry-credentials" {
			t.Errorf("container %s: DOCKER_CONFIG %q", pod.c.Name, v)
		}
		for _, path := range []string{"/etc/brewlet/signature-keys", "/etc/brewlet/registry-ca", "/var/run/brewlet/registry-credentials"} {
			if !slices.ContainsFunc(pod.c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == path && m.ReadOnly }) {
				t.Errorf("container %s: %s not mounted read-only: %+v", pod.c.Name, path, pod.c.VolumeMounts)
			}
		}
		if !slices.ContainsFunc(pod.spec.Volumes, func(v corev1.Volume) bool {
			return v.Name == "signature-keys" && v.ConfigMap != nil && v.ConfigMap.Name == "brewlet-signature-keys"
		}) {
			t.Errorf("container %s: no volume of ConfigMap brewlet-signature-keys", pod.c.Name)
		}
	}
}
