// Package credprovider gets registry credentials the way a node's kubelet does: from the
// credential provider plugins its CredentialProviderConfig names (the kubelet's exec plugin
// API, credentialprovider.kubelet.k8s.io/v1), caching each answer for the duration the
// plugin gives and asking again before it runs out. Cloud registries hand out tokens that
// expire (ECR: 12 hours); a static pull Secret cannot follow them.
package credprovider

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	kubeletconfig "k8s.io/kubelet/config/v1"
	"sigs.k8s.io/yaml"
)

// maxConfigBytes bounds the provider configuration (a few hundred bytes in practice).
const maxConfigBytes = 1 << 20

// pluginAPIVersion is the exec API Brewlet speaks (the kubelet's v1; the beta and alpha
// versions were removed from Kubernetes).
const pluginAPIVersion = "credentialprovider.kubelet.k8s.io/v1"

// Provider is one plugin of the configuration, checked.
type Provider struct {
	Name         string
	MatchImages  []string
	DefaultCache time.Duration
	Args         []string
	Env          []string // NAME=value
}

// Load reads a kubelet CredentialProviderConfig (YAML or JSON, kubelet.config.k8s.io/v1 or
// v1beta1: the same shape), strictly: an unknown field or an unusable provider refuses the
// whole file, as the kubelet refuses to start with it. Providers that need a pod's service
// account token (tokenAttributes with requireServiceAccount) cannot serve a node agent and
// are left out, named in skipped.
func Load(path string) (providers []Provider, skipped []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, nil, err
	}
	if len(b) > maxConfigBytes {
		return nil, nil, fmt.Errorf("%s is larger than %d bytes", path, maxConfigBytes)
	}
	return Parse(b)
}

// Parse is Load's decision on a file's bytes.
func Parse(b []byte) (providers []Provider, skipped []string, err error) {
	var cfg kubeletconfig.CredentialProviderConfig
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return nil, nil, fmt.Errorf("not a CredentialProviderConfig: %w", err)
	}
	if cfg.Kind != "CredentialProviderConfig" || (cfg.APIVersion != "kubelet.config.k8s.io/v1" && cfg.APIVersion != "kubelet.config.k8s.io/v1beta1") {
		return nil, nil, fmt.Errorf("apiVersion %q kind %q: want kubelet.config.k8s.io/v1 CredentialProviderConfig", cfg.APIVersion, cfg.Kind)
	}
	seen := map[string]bool{}
	for i, p := range cfg.Providers {
		where := fmt.Sprintf("providers[%d] (%s)", i, p.Name)
		switch {
		case p.Name == "" || strings.ContainsAny(p.Name, "/\\ ") || p.Name == "." || p.Name == "..":
			return nil, nil, fmt.Errorf("%s: the name must be the plugin's file name in the plugin directory", where)
		case seen[p.Name]:
			return nil, nil, fmt.Errorf("%s: the name appears twice", where)
		case len(p.MatchImages) == 0:
			return nil, nil, fmt.Errorf("%s: matchImages is empty", where)
		case p.DefaultCacheDuration == nil || p.DefaultCacheDuration.Duration < 0:
			return nil, nil, fmt.Errorf("%s: defaultCacheDuration is required and not negative", where)
		case p.APIVersion != pluginAPIVersion:
			return nil, nil, fmt.Errorf("%s: apiVersion %q; Brewlet speaks %s", where, p.APIVersion, pluginAPIVersion)
		}
		seen[p.Name] = true
		for _, m := range p.MatchImages {
			if err := validGlob(m); err != nil {
				return nil, nil, fmt.Errorf("%s: matchImages %q: %w", where, m, err)
			}
		}
		if t := p.TokenAttributes; t != nil && (t.RequireServiceAccount == nil || *t.RequireServiceAccount) {
			skipped = append(skipped, p.Name)
			continue
		}
		pr := Provider{Name: p.Name, MatchImages: p.MatchImages, DefaultCache: p.DefaultCacheDuration.Duration, Args: p.Args}
		for _, e := range p.Env {
			pr.Env = append(pr.Env, e.Name+"="+e.Value)
		}
		providers = append(providers, pr)
	}
	return providers, skipped, nil
}
