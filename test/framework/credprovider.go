package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// A kubelet's registry credentials, from a credential provider plugin as on cloud nodes.

// credentialProvider gives the kubelet credentials for reg (the node's own registry when nil)
// the way nodes get them for cloud registries: a CredentialProviderConfig
// naming a plugin that speaks the kubelet's exec API. The plugin (static, so a pod can run it
// too: the chart's agent reads the same config) answers from a password file.
func (k *KubeletNode) credentialProvider(t TB, reg *RegistryAccess) error {
	if reg == nil {
		reg = k.RegistryAccess
	}
	dir := filepath.Join(k.Dir, "credential-providers")
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	if err := BuildCredPlugin(t, filepath.Join(bin, "brewlet-e2e-credentials")); err != nil {
		return err
	}
	pw := filepath.Join(dir, "password")
	if err := os.WriteFile(pw, []byte(reg.Password), 0o600); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: brewlet-e2e-credentials
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: [%q]
  defaultCacheDuration: 10m
  env:
  - {name: CREDPLUGIN_REGISTRY, value: %q}
  - {name: CREDPLUGIN_USER, value: %q}
  - {name: CREDPLUGIN_PASSWORD, value: %q}
`, reg.Addr, reg.Addr, reg.User, pw)
	k.CredentialProviderConfig, k.CredentialProviderBinDir = filepath.Join(dir, "config.yaml"), bin
	return os.WriteFile(k.CredentialProviderConfig, []byte(cfg), 0o644)
}

// BuildCredPlugin builds the test credential provider plugin (test/framework/credplugin) to
// path, static, so that it also runs in a pod (the chart's agent runs the node's plugins).
func BuildCredPlugin(t TB, path string) error {
	cmd := exec.Command("go", "build", "-o", path, "./test/framework/credplugin")
	cmd.Dir, cmd.Env = RepoRoot(t), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the credential provider plugin: %v\n%s", err, out)
	}
	return nil
}
