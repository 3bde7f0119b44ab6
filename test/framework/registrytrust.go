package framework

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/testutil/testca"
)

// Every registry the harness starts by default (a node's, StartRegistry, StartRegistryWith)
// serves TLS with a certificate from one authority of the test process's own, in no system
// store, and requires a password of its own, as production registries do. Nothing reaches
// one without being given that trust and those credentials:
//
//   - the test process's own calls: RegistryClient;
//   - an Installer in the test process: Trust RegistryTrust, credentials from the Docker
//     config Main points DOCKER_CONFIG at (every default registry's, like `docker login`);
//   - the brewlet CLI and hack/images: --ca-file RegistryCAFile, the same Docker config;
//   - containerd: the node's hosts.toml names the authority; credentials come with each
//     pull (Node.Pull, the kubelet's credential provider).

type processRegistries struct {
	once      sync.Once
	err       error
	ca        *testca.CA
	caFile    string
	dockerDir string
	trust     *registry.Trust
	transport http.RoundTripper

	mu    sync.Mutex
	creds map[string]registryCreds // host:port → the registry's credentials
}

type registryCreds struct {
	authn.Basic
	docker bool // listed in the Docker config
}

var procRegistries processRegistries

// processTrust creates the process's registry authority and Docker config once.
func processTrust() (*processRegistries, error) {
	p := &procRegistries
	p.once.Do(func() {
		in, err := NewProcessInstance("trust")
		if err != nil {
			p.err = err
			return
		}
		if p.ca, err = testca.New("brewlet-e2e-registries"); err != nil {
			p.err = err
			return
		}
		p.caFile, p.dockerDir = filepath.Join(in.Dir, "registries-ca.crt"), filepath.Join(in.Dir, "docker")
		if err := p.ca.WriteCA(p.caFile); err != nil {
			p.err = err
			return
		}
		if p.trust, err = registry.LoadTrust([]string{p.caFile}); err != nil {
			p.err = err
			return
		}
		p.transport = registry.RequireTLS(&http.Transport{TLSClientConfig: p.trust.TLSConfig(), Proxy: http.ProxyFromEnvironment}, false)
		p.creds = map[string]registryCreds{}
		p.err = p.writeDockerConfig()
	})
	return p, p.err
}

func mustProcessTrust(t TB) *processRegistries {
	t.Helper()
	p, err := processTrust()
	if err != nil {
		t.Fatalf("the test process's registry authority: %v", err)
	}
	return p
}

// useProcessDockerConfig points DOCKER_CONFIG at the process's Docker config (Main, before
// any test runs: tests that set their own with t.Setenv get it back afterwards).
func useProcessDockerConfig() error {
	p, err := processTrust()
	if err != nil {
		return err
	}
	return os.Setenv("DOCKER_CONFIG", p.dockerDir)
}

// add records a registry's credentials for RegistryClient and, with docker, for the Docker
// config.
func (p *processRegistries) add(addr, user, password string, docker bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.creds[addr] = registryCreds{Basic: authn.Basic{Username: user, Password: password}, docker: docker}
	if !docker {
		return nil
	}
	return p.writeDockerConfig()
}

func (p *processRegistries) remove(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.creds[addr]
	delete(p.creds, addr)
	if c.docker {
		_ = p.writeDockerConfig()
	}
}

// writeDockerConfig replaces config.json whole (readers load it at every lookup).
func (p *processRegistries) writeDockerConfig() error {
	type entry struct {
		Auth string `json:"auth"`
	}
	auths := map[string]entry{}
	for addr, c := range p.creds {
		if !c.docker {
			continue
		}
		auths[addr] = entry{Auth: base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + c.Password))}
	}
	b, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.dockerDir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(p.dockerDir, "config.json.new")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(p.dockerDir, "config.json"))
}

// Resolve answers the credentials of a registry this process started, none for others.
func (p *processRegistries) Resolve(r authn.Resource) (authn.Authenticator, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.creds[r.RegistryStr()]
	if !ok {
		return authn.Anonymous, nil
	}
	return &authn.Basic{Username: c.Username, Password: c.Password}, nil
}

// RegistryClient are registry client options for the test process's own calls: the
// process's registry authority trusted (TLS required, also on loopback), every default
// registry's credentials given.
func RegistryClient(t TB) []remote.Option {
	t.Helper()
	p := mustProcessTrust(t)
	return []remote.Option{remote.WithTransport(p.transport), remote.WithAuthFromKeychain(p)}
}

// RegistryTransport reaches every default registry over TLS with the process's authority
// trusted (a base for tests that wrap their own round trippers around it).
func RegistryTransport(t TB) http.RoundTripper {
	t.Helper()
	return mustProcessTrust(t).transport
}

// RegistryTrust is the system's authorities plus the process's registry authority, for an
// Installer's Trust (the chart's registry.caBundle on a real node).
func RegistryTrust(t TB) *registry.Trust {
	t.Helper()
	return mustProcessTrust(t).trust
}

// RegistryCAFile is the process's registry authority as a PEM file (the CLI's --ca-file,
// hack/images' --ca-file, the agent's --registry-ca-file).
func RegistryCAFile(t TB) string {
	t.Helper()
	return mustProcessTrust(t).caFile
}

// RegistryServerTLS is a server configuration with a certificate for host from the process's
// registry authority (a test's own registry front: a mirror, a proxy), trusted wherever the
// harness's registries are.
func RegistryServerTLS(t TB, host string) *tls.Config {
	t.Helper()
	l, err := mustProcessTrust(t).ca.Server(host)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := l.TLS()
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// copyProcessCA writes the authority's certificate into dir (a node's registry outlives the
// test process for `make demo`: its clients' CA file must too).
func copyProcessCA(p *processRegistries, dir string) (string, error) {
	path := filepath.Join(dir, "registry-ca.crt")
	if err := p.ca.WriteCA(path); err != nil {
		return "", fmt.Errorf("write the registry CA: %w", err)
	}
	return path, nil
}
