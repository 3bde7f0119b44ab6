package node

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/containerd"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/registry/credprovider"
	"brewlet.sh/brewlet/internal/testutil/testca"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// Runtime images come from a registry serving TLS with a CA in no system store and
// requiring credentials: installed with that CA (the chart's registry.caBundle) and the
// node's credentials. Every way such a pull can go wrong is refused with a typed reason
// naming the registry, and leaves the node exactly as it was (generation 1 current, no
// byte of generation 2): another CA, an expired certificate, a host name the certificate
// does not carry, credentials for another registry, none at all.
func TestInstallFromTLSRegistryWithCredentials(t *testing.T) {
	framework.RequireRoot(t)
	reg := framework.StartRegistryOpts(t, framework.RegistryOptions{TLS: true, User: "puller", Password: "pull-s3cret"})
	other := framework.StartRegistryOpts(t, framework.RegistryOptions{TLS: true, User: "other", Password: "other-s3cret"})
	expired := framework.StartRegistryOpts(t, framework.RegistryOptions{TLS: true, User: "puller", Password: "pull-s3cret",
		Leaf: func(ca *testca.CA) (testca.Leaf, error) {
			return ca.Issue(time.Now().Add(-72*time.Hour), time.Now().Add(-time.Hour), x509.ExtKeyUsageServerAuth, "127.0.0.1")
		}})
	gen1, gen2 := kit.ShellImage(t), kit.WithFile(t, kit.ShellImage(t), "etc/generation", "2")
	ref1 := kit.PushTo(t, reg, "runtimes/shell", gen1, "puller", "pull-s3cret")
	ref2 := kit.PushTo(t, reg, "runtimes/shell", gen2, "puller", "pull-s3cret")
	_, digest2, _ := strings.Cut(ref2, "@")
	// The expired registry's copy is pushed by a client checking the chain at a moment the
	// certificate was valid (framework.Registry.Transport).
	kit.PushTo(t, expired, "runtimes/shell", gen2, "puller", "pull-s3cret")

	trustFor := func(files ...string) *registry.Trust {
		tr, err := registry.LoadTrust(files)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	root := t.TempDir()
	layout := hoststate.Under(root)
	req := install.Request{ID: "shell", Epoch: "5b1c7e2a-9d3f-4c6b-8a1e-2f3d4c5b6a7e", Generation: 1, Image: ref1, UID: 10001, GID: 10001}
	kit.DockerConfig(t, map[string][2]string{reg.Addr: {"puller", "pull-s3cret"}, expired.Addr: {"puller", "pull-s3cret"}})
	in := &install.Installer{Layout: layout, Platform: kit.LinuxAMD64, Trust: trustFor(reg.CAFile)}
	if _, err := in.Install(context.Background(), req); err != nil {
		t.Fatalf("install over TLS with the registry's CA and credentials: %v", err)
	}
	before := kit.NodeTree(t, root)

	localhost := "localhost:" + strings.Split(reg.Addr, ":")[1]
	for _, tc := range []struct {
		name   string
		image  string
		trust  *registry.Trust
		creds  map[string][2]string
		reason vocab.Reason
		says   string
	}{
		{"a CA of another registry", ref2, trustFor(other.CAFile), nil, vocab.ReasonRegistryCertificateInvalid, "no trusted authority"},
		{"the system's authorities only", ref2, nil, nil, vocab.ReasonRegistryCertificateInvalid, "registry.caBundle"},
		{"an expired certificate", expired.Addr + "/runtimes/shell@" + digest2, trustFor(expired.CAFile), nil, vocab.ReasonRegistryCertificateInvalid, "has expired"},
		{"a host name the certificate lacks", localhost + "/runtimes/shell@" + digest2, trustFor(reg.CAFile),
			map[string][2]string{localhost: {"puller", "pull-s3cret"}}, vocab.ReasonRegistryCertificateInvalid, "another host name"},
		{"credentials for another registry", ref2, trustFor(reg.CAFile), map[string][2]string{other.Addr: {"other", "other-s3cret"}}, vocab.ReasonRegistryCredentialsRefused, "HTTP 401"},
		{"a wrong password", ref2, trustFor(reg.CAFile), map[string][2]string{reg.Addr: {"puller", "wrong"}}, vocab.ReasonRegistryCredentialsRefused, "HTTP 401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.creds != nil {
				kit.DockerConfig(t, tc.creds)
			}
			in := &install.Installer{Layout: layout, Platform: kit.LinuxAMD64, Trust: tc.trust}
			r := req
			r.Generation, r.Image = 2, tc.image
			_, err := in.Install(context.Background(), r)
			host := strings.SplitN(tc.image, "/", 2)[0]
			if vocab.ReasonOf(err) != tc.reason || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), host) {
				t.Fatalf("got %v\nwant %s saying %q and naming %s", err, tc.reason, tc.says, host)
			}
			if install.Refused(err) {
				t.Errorf("%s counts as a verdict on the content; it must be retried", tc.reason)
			}
			if after := kit.NodeTree(t, root); !slices.Equal(before, after) {
				t.Errorf("the node changed:\nbefore %v\nafter  %v", before, after)
			}
			if cur, err := layout.Current("shell"); err != nil || cur.Generation != 1 {
				t.Errorf("current %+v %v; want generation 1", cur, err)
			}
		})
	}
}

// The node's containerd registry configuration decides where runtime images come from, as
// for the node's own images: a registry whose name does not even resolve is served by the
// mirrors its hosts.toml lists, each trusted through the CA file hosts.toml names (none is
// given to the agent itself) and reached with the node's credentials for it. The first
// mirror serves other bytes under the image's digest: it is skipped (DigestMismatch, before
// one byte is decompressed) and the next mirror's answer is installed.
func TestInstallThroughTheNodesRegistryConfiguration(t *testing.T) {
	framework.RequireRoot(t)
	honest := framework.StartRegistryOpts(t, framework.RegistryOptions{TLS: true, User: "mirror", Password: "mirror-s3cret"})
	hostile := framework.StartRegistryOpts(t, framework.RegistryOptions{TLS: true, User: "mirror", Password: "mirror-s3cret"})
	img := kit.ShellImage(t)
	kit.PushTo(t, honest, "runtimes/shell", img, "mirror", "mirror-s3cret")
	kit.PushTo(t, hostile, "runtimes/shell", img, "mirror", "mirror-s3cret")
	layers, _ := img.Layers()
	dg, _ := layers[0].Digest()
	size, _ := layers[0].Size()
	data := filepath.Join(hostile.Dir, "registry/docker/registry/v2/blobs/sha256", dg.Hex[:2], dg.Hex, "data")
	if err := os.WriteFile(data, bytes.Repeat([]byte{0x1f}, int(size)), 0o644); err != nil {
		t.Fatalf("swap the hostile mirror's blob: %v", err)
	}
	digest, _ := img.Digest()

	const origin = "registry.brewlet.invalid"
	certs := filepath.Join(t.TempDir(), "certs.d")
	dir := filepath.Join(certs, origin)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"hostile-ca.crt": hostile.CAFile, "honest-ca.crt": honest.CAFile} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hosts := fmt.Sprintf(`server = "https://%s"

[host."https://%s"]
  capabilities = ["pull", "resolve"]
  ca = "hostile-ca.crt"

[host."https://%s"]
  capabilities = ["pull", "resolve"]
  ca = "honest-ca.crt"
`, origin, hostile.Addr, honest.Addr)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	kit.DockerConfig(t, map[string][2]string{honest.Addr: {"mirror", "mirror-s3cret"}, hostile.Addr: {"mirror", "mirror-s3cret"}})

	logs := &logSink{}
	root := t.TempDir()
	layout := hoststate.Under(root)
	in := &install.Installer{Layout: layout, Platform: kit.LinuxAMD64, Log: logs.Logf, NodeHosts: registry.NodeHosts{Dir: certs},
		// The agent's own mirror list for this registry is not used where the node configures it.
		Mirrors: map[string][]string{origin: {"127.0.0.1:1"}}}
	req := install.Request{ID: "shell", Epoch: "0d9c8b7a-6f5e-4d3c-2b1a-0f9e8d7c6b5a", Generation: 1, Image: origin + "/runtimes/shell@" + digest.String(), UID: 10001, GID: 10001}
	res, err := in.Install(context.Background(), req)
	if err != nil {
		t.Fatalf("install through the node's hosts.toml: %v\nlog:\n%s", err, logs)
	}
	if len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0], hostile.Addr) || !strings.Contains(res.Skipped[0], "DigestMismatch") {
		t.Fatalf("skipped %q; want only the hostile mirror, refused by digest", res.Skipped)
	}
	if !strings.Contains(logs.String(), "are not used") {
		t.Errorf("the agent's own mirrors being set aside is not logged:\n%s", logs)
	}
	if cur, err := layout.Current("shell"); err != nil || cur.Generation != 1 {
		t.Fatalf("current %+v %v", cur, err)
	}
	noTmpLeft(t, layout)
}

// connectProxy is an HTTPS proxy (CONNECT only) that resolves names itself: a registry named
// registry.proxy.test exists only through it. It records every CONNECT target.
type connectProxy struct {
	addr    string
	resolve map[string]string // host:port -> dial address
	mu      sync.Mutex
	seen    []string
}

func startConnectProxy(t *testing.T, resolve map[string]string) *connectProxy {
	t.Helper()
	p := &connectProxy{resolve: resolve}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, r.Method+" "+r.Host)
		p.mu.Unlock()
		to, ok := p.resolve[r.Host]
		if r.Method != http.MethodConnect || !ok {
			http.Error(w, "this proxy only tunnels to the test registry", http.StatusForbidden)
			return
		}
		up, err := net.DialTimeout("tcp", to, 5*time.Second)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			_ = up.Close()
			return
		}
		_, _ = conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		go func() { _, _ = io.Copy(up, buf); _ = up.Close() }()
		go func() { _, _ = io.Copy(conn, up); _ = conn.Close() }()
	}))
	t.Cleanup(srv.Close)
	p.addr = srv.Listener.Addr().String()
	return p
}

func (p *connectProxy) connects() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// Runtime images come through the HTTPS proxy the agent is given (HTTPS_PROXY, the chart's
// proxy values): the registry's name resolves only at the proxy, so nothing but the proxy can
// carry the pull. NO_PROXY naming the registry sends it direct, where it cannot be reached.
func TestInstallThroughAProxy(t *testing.T) {
	framework.RequireRoot(t)
	const name = "registry.proxy.test"
	reg := framework.StartRegistryOpts(t, framework.RegistryOptions{TLS: true, User: "puller", Password: "pull-s3cret",
		Leaf: func(ca *testca.CA) (testca.Leaf, error) { return ca.Server("127.0.0.1", name) }})
	ref := kit.PushTo(t, reg, "runtimes/shell", kit.ShellImage(t), "puller", "pull-s3cret")
	port := strings.Split(reg.Addr, ":")[1]
	named := name + ":" + port
	proxy := startConnectProxy(t, map[string]string{named: reg.Addr})
	_, digest, _ := strings.Cut(ref, "@")
	kit.DockerConfig(t, map[string][2]string{named: {"puller", "pull-s3cret"}})
	trust, err := registry.LoadTrust([]string{reg.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	req := install.Request{ID: "shell", Epoch: "3e4f5a6b-7c8d-4e9f-a0b1-c2d3e4f5a6b7", Generation: 1, Image: named + "/runtimes/shell@" + digest, UID: 10001, GID: 10001}

	t.Setenv("HTTPS_PROXY", "http://"+proxy.addr)
	t.Setenv("NO_PROXY", "")
	layout := hoststate.Under(t.TempDir())
	in := &install.Installer{Layout: layout, Platform: kit.LinuxAMD64, Trust: trust}
	if _, err := in.Install(context.Background(), req); err != nil {
		t.Fatalf("install through the proxy: %v (proxy saw %v)", err, proxy.connects())
	}
	if seen := proxy.connects(); len(seen) == 0 || !slices.Contains(seen, "CONNECT "+named) {
		t.Fatalf("the proxy carried %v; want CONNECT %s", seen, named)
	}

	t.Setenv("NO_PROXY", name)
	before := len(proxy.connects())
	direct := &install.Installer{Layout: hoststate.Under(t.TempDir()), Platform: kit.LinuxAMD64, Trust: trust,
		Timeouts: registry.Timeouts{Dial: 5 * time.Second}, Deadline: 30 * time.Second}
	if _, err := direct.Install(context.Background(), req); vocab.ReasonOf(err) != vocab.ReasonRuntimeImagePullFailed {
		t.Fatalf("with NO_PROXY=%s: %v; want RuntimeImagePullFailed (the name resolves only at the proxy)", name, err)
	}
	if after := proxy.connects(); len(after) != before {
		t.Fatalf("NO_PROXY names the registry, yet the proxy saw %v", after[before:])
	}
}

// The CLI reaches a TLS registry whose CA is in no system store with --ca-file, and takes
// its credentials from a Docker credential helper named in the Docker config (credHelpers):
// push, inspect and verify. Without --ca-file the push is refused, naming the certificate.
func TestCLIOverTLSWithACredentialHelper(t *testing.T) {
	reg := framework.StartRegistryOpts(t, framework.RegistryOptions{TLS: true, User: "ci", Password: "ci-s3cret"})
	bin := kit.BuildCLI(t)
	helpers := t.TempDir()
	// The helper protocol: `get` reads the server URL on stdin and prints the credentials.
	helper := "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread server\n[ \"$server\" = \"" + reg.Addr + "\" ] || { echo \"credentials not found in native keychain\"; exit 1; }\n" +
		"printf '{\"ServerURL\":\"%s\",\"Username\":\"ci\",\"Secret\":\"ci-s3cret\"}' \"$server\"\n"
	if err := os.WriteFile(filepath.Join(helpers, "docker-credential-brewlet-e2e"), []byte(helper), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"credHelpers":{"`+reg.Addr+`":"brewlet-e2e"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", cfg)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("PATH", helpers+":"+os.Getenv("PATH"))
	src := t.TempDir()
	kit.WriteTree(t, src, map[string]string{"app/main.sh": "echo hello\n"})
	push := []string{"push", reg.Addr + "/shop/tls:1", "--layer", "app=" + src + ":/app/src", "--entrypoint", "/bin/sh", "--arg", "/app/src/app/main.sh"}

	if _, errOut, code := kit.Brewlet(t, bin, push...); code != 1 || !strings.Contains(errOut, "RegistryCertificateInvalid") || !strings.Contains(errOut, "--ca-file") {
		t.Fatalf("push without --ca-file: exit %d, %s; want a refusal naming the certificate", code, errOut)
	}
	out, errOut, code := kit.Brewlet(t, bin, append(push, "--ca-file", reg.CAFile)...)
	if code != 0 {
		t.Fatalf("push with --ca-file and the credential helper: exit %d: %s", code, errOut)
	}
	ref := kit.LastLine(out)
	for _, cmd := range [][]string{{"inspect", ref}, {"verify", ref}} {
		if _, errOut, code := kit.Brewlet(t, bin, append(cmd, "--ca-file", reg.CAFile)...); code != 0 {
			t.Fatalf("%s with --ca-file: exit %d: %s", cmd[0], code, errOut)
		}
	}
	// The helper answers only for this registry: another name for it gets no credentials.
	if err := os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"credHelpers":{"registry.elsewhere.example":"brewlet-e2e"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := kit.Brewlet(t, bin, "inspect", ref, "--ca-file", reg.CAFile); code != 1 || !strings.Contains(errOut, "RegistryCredentialsRefused") {
		t.Fatalf("inspect without credentials for the registry: exit %d: %s", code, errOut)
	}
}

// Credentials the way the kubelet gets them: the node's CredentialProviderConfig names a
// plugin (a real process speaking the exec API), whose answer is cached for the duration it
// gives. The registry rotates its password (a token expiring): while the cached answer is
// still fresh the install is refused with RegistryCredentialsRefused naming the registry and
// the provider, and nothing on the node changes; once nine tenths of the duration passed the
// plugin is asked again and the install succeeds. A plugin that fails is
// CredentialProviderFailed, naming it.
func TestInstallWithACredentialProvider(t *testing.T) {
	framework.RequireRoot(t)
	reg := framework.StartRegistryOpts(t, framework.RegistryOptions{TLS: true, User: "token", Password: "pw-1"})
	refs := make([]string, 3)
	for i := range refs {
		refs[i] = kit.PushTo(t, reg, "runtimes/shell", kit.WithFile(t, kit.ShellImage(t), "etc/generation", fmt.Sprint(i+1)), "token", "pw-1")
	}
	bin, state := t.TempDir(), t.TempDir()
	kit.Must(t, framework.BuildCredPlugin(t, filepath.Join(bin, "brewlet-test-plugin")))
	pwFile, logFile := filepath.Join(state, "password"), filepath.Join(state, "runs")
	if err := os.WriteFile(pwFile, []byte("pw-1"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := func(name string, env ...string) string {
		envs := ""
		for _, e := range env {
			n, v, _ := strings.Cut(e, "=")
			envs += fmt.Sprintf("\n  - {name: %s, value: %q}", n, v)
		}
		path := filepath.Join(state, name+".yaml")
		body := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: brewlet-test-plugin
  matchImages: [%q]
  defaultCacheDuration: 1m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env:%s
`, reg.Addr, envs)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keychain := func(path string) *credprovider.Keychain {
		providers, _, err := credprovider.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return &credprovider.Keychain{Providers: providers, BinDir: bin, Command: containerd.HostExec{}.Command, Fallback: authn.DefaultKeychain}
	}
	runs := func() int {
		b, _ := os.ReadFile(logFile)
		return strings.Count(string(b), "\n")
	}
	kit.DockerConfig(t, nil) // no credentials besides the plugin's
	trust, err := registry.LoadTrust([]string{reg.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	layout := hoststate.Under(root)
	in := &install.Installer{Layout: layout, Platform: kit.LinuxAMD64, Trust: trust,
		Keychain: keychain(config("good", "CREDPLUGIN_REGISTRY="+reg.Addr, "CREDPLUGIN_USER=token", "CREDPLUGIN_PASSWORD="+pwFile,
			"CREDPLUGIN_CACHE=15s", "CREDPLUGIN_LOG="+logFile))}
	req := func(gen int64) install.Request {
		return install.Request{ID: "shell", Epoch: "6c7d8e9f-0a1b-4c2d-8e3f-4a5b6c7d8e9f", Generation: gen, Image: refs[gen-1], UID: 10001, GID: 10001}
	}
	for gen := int64(1); gen <= 2; gen++ {
		if _, err := in.Install(context.Background(), req(gen)); err != nil {
			t.Fatalf("install generation %d with the plugin's credentials: %v", gen, err)
		}
	}
	if runs() != 1 {
		t.Fatalf("the plugin ran %d times for two installs within its cache duration; want 1", runs())
	}

	// The token changes on the registry and at the plugin; the node still holds the old one.
	if err := reg.SetPassword("token", "pw-2"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwFile, []byte("pw-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := kit.NodeTree(t, root)
	_, err = in.Install(context.Background(), req(3))
	if vocab.ReasonOf(err) != vocab.ReasonRegistryCredentialsRefused || !strings.Contains(err.Error(), reg.Addr) || !strings.Contains(err.Error(), "brewlet-test-plugin") {
		t.Fatalf("install with an expired cached credential: %v; want RegistryCredentialsRefused naming %s and the provider", err, reg.Addr)
	}
	if after := kit.NodeTree(t, root); !slices.Equal(before, after) {
		t.Errorf("a refused credential changed the node:\nbefore %v\nafter  %v", before, after)
	}
	// Asked again before the answer's 15 s run out: the new token installs generation 3.
	deadline := time.Now().Add(45 * time.Second)
	for {
		_, err = in.Install(context.Background(), req(3))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil || runs() != 2 {
		t.Fatalf("after the cache duration: %v, plugin runs %d; want success after exactly one more run", err, runs())
	}

	t.Run("a failing plugin", func(t *testing.T) {
		// A node of its own: a digest this node installed before is not fetched again, so
		// asks no plugin (install/reinstate.go).
		root := t.TempDir()
		failing := &install.Installer{Layout: hoststate.Under(root), Platform: kit.LinuxAMD64, Trust: trust,
			Keychain: keychain(config("failing", "CREDPLUGIN_FAIL=no instance role"))}
		r := req(1)
		before := kit.NodeTree(t, root)
		_, err := failing.Install(context.Background(), r)
		if vocab.ReasonOf(err) != vocab.ReasonCredentialProviderFailed || !strings.Contains(err.Error(), "brewlet-test-plugin") ||
			!strings.Contains(err.Error(), "no instance role") || !strings.Contains(err.Error(), reg.Addr) {
			t.Fatalf("got %v; want CredentialProviderFailed naming the plugin, its message and the registry", err)
		}
		if after := kit.NodeTree(t, root); !slices.Equal(before, after) {
			t.Errorf("the node changed:\nbefore %v\nafter  %v", before, after)
		}
	})
}
