package framework

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// A node's loopback OCI registry (on the machine's end of its link with OwnNetwork),
// standalone registries for tests, and containerd's plain-HTTP hosts configuration.

func (n *Node) startRegistry(t TB) error {
	host := "127.0.0.1"
	if n.net != nil {
		host = n.HostAddr()
	}
	addr, p, err := startRegistryIn(t, n.Instance, host, "")
	n.Registry, n.RegistryProc = addr, p
	return err
}

// Registry is a standalone loopback OCI registry (the distribution registry).
type Registry struct {
	*Instance
	Addr string // host:port
	Proc *Process
}

// StartRegistry starts a registry of its own, removed when the test ends.
func StartRegistry(t TB) *Registry { return StartRegistryWith(t, "", "") }

// StartRegistryWith starts a registry that requires basic credentials when user is set.
func StartRegistryWith(t TB, user, password string) *Registry {
	t.Helper()
	Tool(t, "registry")
	in := NewInstance(t, "r")
	auth := ""
	if user != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		htpasswd := filepath.Join(in.Dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: brewlet-e2e\n    path: %s\n", htpasswd)
	}
	addr, p, err := startRegistryIn(t, in, "127.0.0.1", auth)
	if err != nil {
		t.Fatalf("start registry: %v", err)
	}
	return &Registry{Instance: in, Addr: addr, Proc: p}
}

func startRegistryIn(t TB, in *Instance, host, auth string) (string, *Process, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(FreePort(t)))
	cfg := filepath.Join(in.Dir, "registry.yml")
	body := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n%s",
		filepath.Join(in.Dir, "registry"), addr, auth)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return "", nil, err
	}
	p, err := in.Start("registry", nil, Tool(t, "registry"), "serve", cfg)
	if err != nil {
		return "", nil, err
	}
	return addr, p, p.WaitReady(60*time.Second, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
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
