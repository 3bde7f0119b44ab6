package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/crypto/bcrypt"

	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/testutil/testca"
)

// A node's loopback OCI registry (on the machine's end of its link with OwnNetwork),
// standalone registries for tests, and containerd's hosts configuration for them.

func (n *Node) startRegistry(t TB) error {
	host := "127.0.0.1"
	if n.net != nil {
		host = n.HostAddr()
	} else if n.opts.HostReachable {
		// On the pod bridge's gateway, where pods reach the machine (brewlet-operator reads
		// signatures from it without host networking), as a cluster's registry is reachable
		// from its pods.
		if err := n.createBridge(); err != nil {
			return err
		}
		n.bridgeUp, host = true, n.Gateway()
	}
	r := startRegistryAt(t, n.Instance, host, RegistryOptions{processCA: true, dockerConfig: true})
	n.Registry, n.RegistryProc, n.RegistryAccess = r.Addr, r.Proc, r.access
	return nil
}

// RegistryAccess is what a client needs to reach a node's registry: it serves TLS with a CA
// in no system store and requires credentials (registrytrust.go).
type RegistryAccess struct {
	Addr           string // host:port
	CAFile         string // the registry's CA, in no system store
	User, Password string
	transport      http.RoundTripper
}

// NewRegistryAccess describes a registry serving TLS with the CA in caFile (a cluster's
// registry, described again by a process that did not start it).
func NewRegistryAccess(addr, caFile, user, password string) *RegistryAccess {
	a := &RegistryAccess{Addr: addr, CAFile: caFile, User: user, Password: password}
	pool := x509.NewCertPool()
	if b, err := os.ReadFile(caFile); err == nil {
		pool.AppendCertsFromPEM(b)
	}
	a.transport = registry.RequireTLS(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}, false)
	return a
}

// Options are registry client options for pushes from the test process: the registry's CA
// trusted, its credentials given.
func (a *RegistryAccess) Options() []remote.Option {
	// A keychain, not an authenticator: it replaces the Docker config's keychain callers
	// such as registry.Options set first (the client refuses both kinds at once).
	return []remote.Option{remote.WithTransport(a.transport), remote.WithAuthFromKeychain(a)}
}

// Resolve answers the registry's credentials for its own host, none for any other.
func (a *RegistryAccess) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if r.RegistryStr() != a.Addr {
		return authn.Anonymous, nil
	}
	return &authn.Basic{Username: a.User, Password: a.Password}, nil
}

// DockerConfig writes a Docker config directory (config.json) with the registry's
// credentials into dir, for DOCKER_CONFIG of the brewlet CLI and helm's registry clients.
func (a *RegistryAccess) DockerConfig(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	auth := base64.StdEncoding.EncodeToString([]byte(a.User + ":" + a.Password))
	body := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, a.Addr, auth)
	return os.WriteFile(filepath.Join(dir, "config.json"), []byte(body), 0o600)
}

// Registry is a standalone loopback OCI registry (the distribution registry).
type Registry struct {
	*Instance
	Addr string // host:port
	Proc *Process
	// With TLS: the registry's own CA (in no system store) and its PEM file.
	CA     *testca.CA
	CAFile string
	tls    *tls.Config
	access *RegistryAccess
}

// RegistryOptions shape a standalone registry.
type RegistryOptions struct {
	User, Password string // basic credentials required when User is set
	// TLS serves HTTPS with a certificate for 127.0.0.1 only (not "localhost") issued by a
	// CA of the registry's own; Leaf, when set, is used instead (expired, other names).
	// Neither TLS nor User: plain HTTP, open to anyone.
	TLS  bool
	Leaf func(ca *testca.CA) (testca.Leaf, error)

	processCA    bool // TLS with the process's registry authority (registrytrust.go); no User: one made up
	dockerConfig bool // the credentials go into the process's Docker config
}

// StartRegistry starts a registry of its own, removed when the test ends: TLS from the
// process's registry authority, a password of its own in the process's Docker config
// (registrytrust.go).
func StartRegistry(t TB) *Registry {
	t.Helper()
	return startRegistryAt(t, NewInstance(t, "r"), "127.0.0.1", RegistryOptions{processCA: true, dockerConfig: true})
}

// StartRegistryWith starts a registry as StartRegistry does, with the credentials given and
// not in the Docker config (tests of how credentials reach a client).
func StartRegistryWith(t TB, user, password string) *Registry {
	t.Helper()
	return startRegistryAt(t, NewInstance(t, "r"), "127.0.0.1", RegistryOptions{User: user, Password: password, processCA: true})
}

// StartRegistryOpts starts a registry as o says.
func StartRegistryOpts(t TB, o RegistryOptions) *Registry {
	t.Helper()
	return startRegistryAt(t, NewInstance(t, "r"), "127.0.0.1", o)
}

// startRegistryAt starts a registry of instance in listening on host, as o says.
func startRegistryAt(t TB, in *Instance, host string, o RegistryOptions) *Registry {
	t.Helper()
	Tool(t, "registry")
	r := &Registry{Instance: in}
	if o.processCA && o.User == "" {
		// A password of the registry's own: nothing else reaches it by guessing.
		o.User, o.Password = "brewlet-e2e", "pw-"+in.ID+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	extra := ""
	if o.User != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(o.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		htpasswd := filepath.Join(in.Dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(o.User+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		extra = fmt.Sprintf("auth:\n  htpasswd:\n    realm: brewlet-e2e\n    path: %s\n", htpasswd)
	}
	var tlsCfg *registryTLS
	if o.TLS || o.processCA {
		var ca *testca.CA
		var err error
		if o.processCA {
			p := mustProcessTrust(t)
			ca = p.ca
			r.CAFile, err = copyProcessCA(p, in.Dir)
		} else {
			ca, err = testca.New("brewlet-e2e-registry-ca")
			r.CAFile = filepath.Join(in.Dir, "ca.crt")
			if err == nil {
				err = ca.WriteCA(r.CAFile)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		r.CA = ca
		leaf := func(ca *testca.CA) (testca.Leaf, error) { return ca.Server(host) }
		if o.Leaf != nil {
			leaf = o.Leaf
		}
		l, err := leaf(ca)
		if err != nil {
			t.Fatal(err)
		}
		cert, key, err := l.Write(in.Dir, "registry")
		if err != nil {
			t.Fatal(err)
		}
		leafCert, err := x509.ParseCertificate(mustPEM(t, l.CertPEM))
		if err != nil {
			t.Fatal(err)
		}
		r.tls = &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12,
			// Verified at a moment its certificate is valid: tests serving an expired one still
			// push their content through a checked chain.
			Time: func() time.Time { return leafCert.NotBefore.Add(time.Minute) }}
		r.tls.RootCAs.AddCert(ca.Cert)
		tlsCfg = &registryTLS{cert: cert, key: key, client: r.tls}
	}
	addr, p, err := startRegistryIn(t, in, host, extra, tlsCfg)
	if err != nil {
		t.Fatalf("start registry: %v", err)
	}
	r.Addr, r.Proc = addr, p
	if o.processCA {
		pt := mustProcessTrust(t)
		if err := pt.add(addr, o.User, o.Password, o.dockerConfig); err != nil {
			t.Fatal(err)
		}
		in.OnCleanup(func() { pt.remove(addr) })
		r.access = &RegistryAccess{Addr: addr, CAFile: r.CAFile, User: o.User, Password: o.Password, transport: r.Transport()}
	}
	return r
}

// Access is how a client reaches a registry started by StartRegistry or StartRegistryWith
// (nil for StartRegistryOpts').
func (r *Registry) Access() *RegistryAccess { return r.access }

// SetPassword replaces the registry's only credential (it was started with one): the
// registry reads its password file again when the file changes, as a token rotation.
func (r *Registry) SetPassword(user, password string) error {
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		return err
	}
	path := filepath.Join(r.Dir, "htpasswd")
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
		return err
	}
	// A later modification time than the old file's, even on a coarse clock.
	later := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(tmp, later, later); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Transport reaches the registry: over TLS with its CA trusted when it serves TLS (the
// registry client would pick plain HTTP for a loopback address by itself).
func (r *Registry) Transport() http.RoundTripper {
	if r.tls == nil {
		return http.DefaultTransport
	}
	return registry.RequireTLS(&http.Transport{TLSClientConfig: r.tls.Clone()}, false)
}

func mustPEM(t TB, b []byte) []byte {
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("no PEM block in an issued certificate")
	}
	return blk.Bytes
}

type registryTLS struct {
	cert, key string
	client    *tls.Config // what readiness checks the served certificate with
}

func startRegistryIn(t TB, in *Instance, host, auth string, tlsCfg *registryTLS) (string, *Process, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(FreePort(t)))
	cfg := filepath.Join(in.Dir, "registry.yml")
	scheme, client, httpTLS := "http", http.DefaultClient, ""
	if tlsCfg != nil {
		scheme = "https"
		httpTLS = fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n", tlsCfg.cert, tlsCfg.key)
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg.client.Clone()}}
	}
	body := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n%s%s",
		filepath.Join(in.Dir, "registry"), addr, httpTLS, auth)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return "", nil, err
	}
	p, err := in.Start("registry", nil, Tool(t, "registry"), "serve", cfg)
	if err != nil {
		return "", nil, err
	}
	return addr, p, p.WaitReady(60*time.Second, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK || (auth != "" && resp.StatusCode == http.StatusUnauthorized) {
			return nil // serving (and, with auth, asking for credentials)
		}
		return fmt.Errorf("registry /v2/: %s", resp.Status)
	})
}

// TrustRegistry lets the node pull from another node's registry, as the nodes of a cluster
// share one registry: TLS with its CA.
func (n *Node) TrustRegistry(addr string, access *RegistryAccess) error {
	return writeHosts(n.Dir, addr, access)
}

func (n *Node) writeRegistryHosts() error { return writeHosts(n.Dir, n.Registry, n.RegistryAccess) }

// writeHosts writes containerd's hosts.toml for a registry below a node's certs.d (read at
// each pull: no restart needed): TLS with the registry's CA copied beside it (credentials
// come with the pull: the kubelet's credential provider, Node.Pull).
func writeHosts(nodeDir, registry string, access *RegistryAccess) error {
	dir := filepath.Join(nodeDir, "certs.d", registry)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ca, err := os.ReadFile(access.CAFile)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o644); err != nil {
		return err
	}
	body := fmt.Sprintf("server = \"https://%s\"\n\n[host.\"https://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"ca.crt\"\n", registry, registry)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(body), 0o644)
}
