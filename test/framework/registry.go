package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/crypto/bcrypt"

	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/testutil/testca"
)

// A node's loopback OCI registry (on the machine's end of its link with OwnNetwork),
// standalone registries for tests, and containerd's plain-HTTP hosts configuration.

func (n *Node) startRegistry(t TB) error {
	host := "127.0.0.1"
	if n.net != nil {
		host = n.HostAddr()
	}
	addr, p, err := startRegistryIn(t, n.Instance, host, "", nil)
	n.Registry, n.RegistryProc = addr, p
	return err
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
}

// RegistryOptions shape a standalone registry.
type RegistryOptions struct {
	User, Password string // basic credentials required when User is set
	// TLS serves HTTPS with a certificate for 127.0.0.1 only (not "localhost") issued by a
	// CA of the registry's own; Leaf, when set, is used instead (expired, other names).
	TLS  bool
	Leaf func(ca *testca.CA) (testca.Leaf, error)
}

// StartRegistry starts a registry of its own, removed when the test ends.
func StartRegistry(t TB) *Registry { return StartRegistryOpts(t, RegistryOptions{}) }

// StartRegistryWith starts a registry that requires basic credentials when user is set.
func StartRegistryWith(t TB, user, password string) *Registry {
	return StartRegistryOpts(t, RegistryOptions{User: user, Password: password})
}

// StartRegistryOpts starts a registry as o says.
func StartRegistryOpts(t TB, o RegistryOptions) *Registry {
	t.Helper()
	Tool(t, "registry")
	in := NewInstance(t, "r")
	r := &Registry{Instance: in}
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
	if o.TLS {
		ca, err := testca.New("brewlet-e2e-registry-ca")
		if err != nil {
			t.Fatal(err)
		}
		r.CA, r.CAFile = ca, filepath.Join(in.Dir, "ca.crt")
		if err := ca.WriteCA(r.CAFile); err != nil {
			t.Fatal(err)
		}
		leaf := func(ca *testca.CA) (testca.Leaf, error) { return ca.Server("127.0.0.1") }
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
	addr, p, err := startRegistryIn(t, in, "127.0.0.1", extra, tlsCfg)
	if err != nil {
		t.Fatalf("start registry: %v", err)
	}
	r.Addr, r.Proc = addr, p
	return r
}

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

// TrustRegistry lets the node pull from another node's registry (plain HTTP), as
// the nodes of a cluster share one registry.
func (n *Node) TrustRegistry(addr string) error { return writeHosts(n.Dir, addr) }

func (n *Node) writeRegistryHosts() error { return writeHosts(n.Dir, n.Registry) }

// writeHosts writes containerd's hosts.toml for a plain-HTTP registry below a node's
// certs.d (read at each pull: no restart needed).
func writeHosts(nodeDir, registry string) error {
	dir := filepath.Join(nodeDir, "certs.d", registry)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	body := fmt.Sprintf("server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", registry, registry)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(body), 0o644)
}
