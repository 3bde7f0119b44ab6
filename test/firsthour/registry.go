package firsthour

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"brewlet.sh/brewlet/internal/signature"
)

// The registry objects the chart's values name: the registry's CA (registry.caBundle) and
// its credentials (provisioner.registry.credentialsSecret).
const (
	RegistryCA     = "brewlet-registry-ca"
	RegistrySecret = "brewlet-registry"
)

// registryEnv is the environment of the commands that push to the cluster's registry (the
// brewlet CLI, hack/runtimes.sh): a Docker config with its credentials, and its CA.
func (f *Flow) registryEnv() ([]string, error) {
	dir := filepath.Join(f.C.WorkDir(), "docker")
	if err := f.C.RegistryAccess().DockerConfig(dir); err != nil {
		return nil, err
	}
	return []string{"DOCKER_CONFIG=" + dir, "BREWLET_REGISTRY_CA_FILE=" + f.C.RegistryCAFile}, nil
}

// registryObjects creates the release namespace, the CA ConfigMap and the pull Secret.
func (f *Flow) registryObjects(ctx context.Context) error {
	ca, err := os.ReadFile(f.C.RegistryCAFile)
	if err != nil {
		return err
	}
	dockerConfig, err := os.ReadFile(filepath.Join(f.C.WorkDir(), "docker", "config.json"))
	if err != nil {
		return fmt.Errorf("the registry's Docker config (written when the runtimes were built): %w", err)
	}
	if err := f.createIfAbsent(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
		return err
	}
	if err := f.createIfAbsent(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: RegistryCA, Namespace: Namespace},
		Data: map[string]string{"ca.crt": string(ca)}}); err != nil {
		return err
	}
	return f.createIfAbsent(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: RegistrySecret, Namespace: Namespace},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig}})
}

// signRuntimes signs both CPython generations with the cluster's signing key (made on the
// first run, kept in the cluster's directory): the chart requires that key's signature of
// every runtime digest (verification.publicKeys).
func (f *Flow) signRuntimes(ctx context.Context) (string, error) {
	path := filepath.Join(f.C.WorkDir(), "signing.key")
	s, err := signature.LoadSigner(path)
	if os.IsNotExist(err) {
		if s, err = signature.GenerateKey(); err != nil {
			return "", err
		}
		b, err := s.PrivatePEM()
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	pub, err := s.PublicPEM()
	if err != nil {
		return "", err
	}
	f.SigningKey = string(pub)
	f.signer = s
	var lines []string
	for _, gen := range []string{"python1", "python2"} {
		m, err := f.Sign(ctx, f.Runtimes[gen])
		if err != nil {
			return "", err
		}
		lines = append(lines, fmt.Sprintf("%s: signed by key %s (signature %s)", gen, s.KeyID(), m))
	}
	return strings.Join(lines, "\n"), nil
}

// Sign attaches the cluster key's signature of ref (repo@sha256:...) in the node's
// registry, as the chart's verification requires of every runtime digest; it returns the
// signature's digest.
func (f *Flow) Sign(ctx context.Context, ref string) (string, error) {
	if f.signer == nil {
		return "", fmt.Errorf("no signing key yet: the walk-through's signing step makes it")
	}
	d, err := name.NewDigest(ref)
	if err != nil {
		return "", err
	}
	b, err := f.signer.Bundle(d.DigestStr())
	if err != nil {
		return "", err
	}
	m, err := signature.Attach(ctx, d, b, f.C.RegistryAccess().Options()...)
	if err != nil {
		return "", err
	}
	return m, nil
}
