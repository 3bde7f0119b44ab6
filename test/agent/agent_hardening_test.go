package agent

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/agent"
	"brewlet.sh/brewlet/internal/provisioner/gc"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// A node agent's world without a container runtime: a real API server, a real registry
// with the CPython runtimes, this node's Node object in pool "general", and a private host
// layout. The agent tests that need no container start use it.
type agentWorld struct {
	cp       *framework.ControlPlane
	reg      *framework.Registry
	refs     map[string]string
	nodeName string
	host     hoststate.Layout
}

func newAgentWorld(t *testing.T) *agentWorld {
	t.Helper()
	return newAgentWorldWith(t, framework.ControlPlaneOptions{})
}

// newAgentWorldWith is newAgentWorld on a control plane with these options (a scheduler).
func newAgentWorldWith(t *testing.T, opts framework.ControlPlaneOptions) *agentWorld {
	t.Helper()
	framework.RequireRoot(t) // extraction keeps owners and xattrs
	w := &agentWorld{cp: framework.StartControlPlane(t, opts), reg: framework.StartRegistry(t),
		nodeName: "node-agent", host: hoststate.Under(t.TempDir())}
	kit.StartOperator(t, w.cp, false) // generations, approval and NodeRuntime spec come from the operator
	w.refs = kit.BuildRuntimes(t, w.reg.Addr, "python")
	if err := w.cp.Client.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.nodeName,
		Labels: map[string]string{"node-restriction.kubernetes.io/pool": "general"}}}); err != nil {
		t.Fatal(err)
	}
	return w
}

// offer creates approved RuntimeImages at generation 1 (ID -> image) and the NodeProfile
// offering them eagerly to pool "general".
func (w *agentWorld) offer(t *testing.T, images map[string]string) *brewletv1.NodeProfile {
	t.Helper()
	ctx := context.Background()
	np := &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}, Spec: brewletv1.NodeProfileSpec{
		NodePool: brewletv1.NodePool{Key: "node-restriction.kubernetes.io/pool", Names: []string{"general"}}}}
	for id, image := range images {
		ri := kit.RuntimeImage(id, image)
		if err := w.cp.Client.Create(ctx, ri); err != nil {
			t.Fatal(err)
		}
		kit.WaitGeneration(t, w.cp.Client, ri, 1)
		np.Spec.RuntimeImages = append(np.Spec.RuntimeImages, brewletv1.OfferedRuntime{ID: id, Install: "Eager"})
	}
	if err := w.cp.Client.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	return np
}

func (w *agentWorld) agent(t *testing.T, ttl, period time.Duration) *agent.Agent {
	return &agent.Agent{Client: w.cp.Client, NodeName: w.nodeName, Layout: w.host, AuthTTL: ttl, Period: period, Log: t.Logf,
		Installer: &install.Installer{Layout: w.host, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}}
}

// run starts a.Run and returns its stop, which returns once Run (and every install it
// started) has.
func run(a *agent.Agent) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = a.Run(ctx) }()
	return func() { cancel(); <-ran }
}

// waitFor polls cond every 100ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// An agent that restarts does not trust its memory: an ID whose authorization is on disk
// but that the cluster stopped offering while the agent was away is revoked by the first
// pass, before the startup fence opens, so no container starts on it in between; the
// revocation is then left as it is, not rewritten every pass. Install requests nothing will
// answer are cleared.
func TestAgentRestartRevokesDroppedID(t *testing.T) {
	w := newAgentWorld(t)
	ctx := context.Background()
	np := w.offer(t, map[string]string{kit.PyID: w.refs["python1"]})
	first := w.agent(t, 2*time.Minute, 0)
	if err := first.ReconcileAndWait(ctx); err != nil {
		t.Fatal(err)
	}
	first.Close()
	if auth, err := w.host.ReadAuthorization(kit.PyID); err != nil || auth.Check(time.Now()) != nil {
		t.Fatalf("authorization before the restart: %+v %v", auth, err)
	}
	// While the agent is away, the node leaves every profile; its authorization on disk
	// is still valid for minutes.
	if err := w.cp.Client.Delete(ctx, np); err != nil {
		t.Fatal(err)
	}
	restarted := w.agent(t, 2*time.Minute, time.Second) // a new process: nothing in memory
	if err := w.host.CloseFence(); err != nil {         // as the new process's Run does first
		t.Fatal(err)
	}
	// Requests no install will answer (a dropped ID, an ID never offered) are cleared, not
	// left to wake the loop again and again.
	for _, id := range []string{kit.PyID, "python-never-offered"} {
		if err := w.host.RequestInstall(id); err != nil {
			t.Fatal(err)
		}
	}
	stop := run(restarted)
	waitFor(t, 60*time.Second, "the startup fence to open", func() bool { return w.host.CheckFence() == nil })
	auth, err := w.host.ReadAuthorization(kit.PyID)
	if err != nil {
		t.Fatal(err)
	}
	// What the shim decides at every create: refused, not started.
	if err := auth.Check(time.Now()); vocab.ReasonOf(err) != vocab.ReasonRuntimeImageRevoked {
		t.Fatalf("the fence opened with a dropped ID still authorized: %+v (%v)", auth, err)
	}
	waitFor(t, 10*time.Second, "stale install requests to be cleared", func() bool { return len(w.host.Requests()) == 0 })
	stop()
	before, err := os.Stat(w.host.AuthorizationFile(kit.PyID))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := restarted.ReconcileAndWait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if after, err := os.Stat(w.host.AuthorizationFile(kit.PyID)); err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the revocation was rewritten by later passes (%v)", err)
	}
}

// One runtime's install stalls mid-body at the registry; the other runtime's authorization
// keeps being renewed meanwhile (installs never hold up a pass), and the stalled runtime
// installs once the registry moves again.
func TestAgentRenewsWhileRegistryStalls(t *testing.T) {
	w := newAgentWorld(t)
	proxy := startStallProxy(t, w.reg)
	const stalledID = "python-stalled"
	_, path, _ := strings.Cut(w.refs["python2"], "/")
	w.offer(t, map[string]string{kit.PyID: w.refs["python1"], stalledID: proxy.addr + "/" + path})
	ttl := 6 * time.Second
	a := w.agent(t, ttl, time.Second)
	a.Collector = &gc.Collector{Layout: w.host, Grace: time.Hour, MountInfo: "/proc/self/mountinfo"}
	stop := run(a)
	defer stop()
	waitFor(t, 3*time.Minute, kit.PyID+" to be installed and authorized", func() bool {
		auth, err := w.host.ReadAuthorization(kit.PyID)
		return err == nil && auth.Check(time.Now()) == nil
	})
	select {
	case <-proxy.stalled:
	case <-time.After(2 * time.Minute):
		t.Fatal("the install of the stalled runtime never reached a layer blob")
	}
	// Three TTLs with the stalled install in flight: pyID never lapses, and is renewed.
	expiries := map[time.Time]bool{}
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		auth, err := w.host.ReadAuthorization(kit.PyID)
		if err != nil {
			t.Fatal(err)
		}
		if err := auth.Check(time.Now()); err != nil {
			t.Fatalf("%s lapsed while another runtime's install stalled: %v", kit.PyID, err)
		}
		expiries[auth.ExpiresAt] = true
	}
	if len(expiries) < 5 {
		t.Fatalf("%s renewed %d times in %s with a period of 1s", kit.PyID, len(expiries), 3*ttl)
	}
	close(proxy.release)
	waitFor(t, 2*time.Minute, stalledID+" to install once the registry moves again", func() bool {
		auth, err := w.host.ReadAuthorization(stalledID)
		return err == nil && auth.Check(time.Now()) == nil
	})
}

// stallProxy forwards to a registry, but sends only half of every large blob (a layer)
// and then holds the connection until release is closed. Like blobStallProxy it serves TLS
// from the test process's registry authority and brings its own credentials to the origin.
type stallProxy struct {
	addr    string
	release chan struct{}
	stalled chan struct{} // closed the first time a body stalls
	once    sync.Once
}

func startStallProxy(t *testing.T, upstream *framework.Registry) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := upstream.Access()
	up := &kit.BasicAuth{User: a.User, Password: a.Password, RT: framework.RegistryTransport(t)}
	p := &stallProxy{addr: ln.Addr().String(), release: make(chan struct{}), stalled: make(chan struct{})}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, "https://"+upstream.Addr+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := up.RoundTrip(req)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		for k, v := range resp.Header {
			rw.Header()[k] = v
		}
		rw.WriteHeader(resp.StatusCode)
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") && resp.ContentLength > 64<<10 {
			_, _ = io.CopyN(rw, resp.Body, resp.ContentLength/2)
			rw.(http.Flusher).Flush()
			p.once.Do(func() { close(p.stalled) })
			select {
			case <-p.release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.Copy(rw, resp.Body)
	})}
	go func() { _ = srv.Serve(tls.NewListener(ln, framework.RegistryServerTLS(t, "127.0.0.1"))) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}
