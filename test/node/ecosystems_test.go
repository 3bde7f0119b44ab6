package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// ecosystem is one of hack/runtimes.sh's runtimes at its two generations (Debian's release
// version and its security update) and the sample application of examples/ that runs on it.
type ecosystem struct {
	id         string   // RuntimeImage ID
	ref1, ref2 string   // hack/runtimes.sh output names
	pkg        string   // the runtime's own Debian package the generations differ in
	uid        int64    // the runtime's user
	path       string   // the runtime's PATH, "(none)" for none
	app        string   // examples/ directory
	entrypoint []string // entrypoint and arguments of the artifact
	changed    int      // layers a rotation changes: the runtime's own and the metadata
	// version returns what the app's answer says about the runtime's version, besides the
	// release file, given the Debian version of pkg ("" when it says nothing more).
	version func(debian string) string
}

var ecosystems = []ecosystem{
	{id: kit.PyID, ref1: "python1", ref2: "python2", pkg: "python3.11-minimal", uid: 10001,
		app: "hello-web", entrypoint: []string{"python", "/app/hello-web/server.py"}, changed: 2},
	{id: "jre-17", ref1: "jre-17-1", ref2: "jre-17-2", pkg: "openjdk-17-jre-headless", uid: 10001,
		path: "/usr/local/bin:/usr/bin:/bin", app: "hello-java",
		entrypoint: []string{"java", "-jar", "/app/hello-java/hello.jar"}, changed: 2,
		// Runtime.version() is the upstream version and Debian's revision: 17.0.19+10-1-deb12u2-Debian
		version: func(debian string) string { return "hello from java " + strings.ReplaceAll(debian, "~", "-") }},
	{id: "node-18", ref1: "node-18-1", ref2: "node-18-2", pkg: "nodejs", uid: 10001,
		path: "/usr/local/bin:/usr/bin:/bin", app: "hello-node",
		entrypoint: []string{"node", "/app/hello-node/server.js"}, changed: 2,
		version: func(debian string) string { return "hello from node v" + strings.SplitN(debian, "+", 2)[0] }},
	// The distroless runtime: no base layer, its packages (tzdata, ca-certificates) change.
	{id: "static", ref1: "static-1", ref2: "static-2", pkg: "tzdata", uid: 65532, path: "(none)",
		app: "hello-static", entrypoint: []string{"/app/hello-static/hello"}, changed: 2},
}

// debianVersion returns pkg's version in a Debian suite ("bookworm" is the release,
// "bookworm-security" the security updates), as hack/runtimes.sh picks it.
func debianVersion(t *testing.T, pkg, suite string) string {
	t.Helper()
	out, err := exec.Command("apt-cache", "madison", pkg).Output()
	if err != nil {
		t.Fatalf("apt-cache madison %s: %v", pkg, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Split(l, "|")
		if len(f) == 3 && strings.Contains(f[2], "deb.debian.org") && strings.Contains(f[2], " "+suite+"/main ") {
			return strings.TrimSpace(f[1])
		}
	}
	t.Fatalf("no %s version of %s in apt-cache madison:\n%s", suite, pkg, out)
	return ""
}

// Every runtime of hack/runtimes.sh runs its sample application (an artifact holding only
// /app) through the shim as the runtime's non-root user with the runtime's PATH (or none),
// and rotates from Debian's release version to its security update: the rotation fetches
// only the changed layers, a new container answers with the patched version, and a
// container started before keeps answering with the release version.
func TestEcosystems(t *testing.T) {
	n := framework.StartNodeWith(t, framework.NodeOptions{HostReachable: true})
	refs := kit.BuildRuntimes(t, n.Registry, "all")
	cli := kit.BuildCLI(t)
	host := hoststate.Under(n.HostPrefix)
	inst := &install.Installer{Layout: host, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}
	if err := host.OpenFence(); err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	fmt.Fprintf(&report, "\n| runtime | generation 1 → 2 (%s) | layers fetched | bytes extracted (rotation / cold) |\n|---|---|---|---|\n", "Debian bookworm → bookworm-security")
	for i, e := range ecosystems {
		t.Run(e.id, func(t *testing.T) {
			rel, upd := debianVersion(t, e.pkg, "bookworm"), debianVersion(t, e.pkg, "bookworm-security")
			epoch := fmt.Sprintf("5e0c0f3a-8d7b-4c2e-9a1f-%012d", i+1)
			installGen := func(gen int64, ref string) *install.Result {
				t.Helper()
				r, err := inst.Install(context.Background(), install.Request{ID: e.id, Epoch: epoch, Generation: gen,
					Image: refs[ref], UID: e.uid, GID: e.uid})
				if err != nil {
					t.Fatalf("install %s generation %d: %v", e.id, gen, err)
				}
				now := time.Now()
				if err := host.WriteAuthorization(hoststate.Authorization{ID: e.id, Epoch: epoch, Generation: gen,
					ConfirmedAt: now, ExpiresAt: now.Add(10 * time.Minute), Node: "e2e-node"}); err != nil {
					t.Fatal(err)
				}
				return r
			}
			r1 := installGen(1, e.ref1)

			src := t.TempDir()
			if out, err := exec.Command(filepath.Join(framework.RepoRoot(t), "examples", "build.sh"), e.app, src).CombinedOutput(); err != nil {
				t.Fatalf("examples/build.sh %s: %v\n%s", e.app, err, out)
			}
			args := []string{"push", n.Registry + "/apps/" + e.app + ":1", "--layer", "app=" + src + ":/app/" + e.app,
				"--entrypoint", e.entrypoint[0], "--env", "PORT=8080", "--requires-runtime", e.id}
			for _, a := range e.entrypoint[1:] {
				args = append(args, "--arg", a)
			}
			out, errOut, code := kit.Brewlet(t, cli, args...)
			if code != 0 {
				t.Fatalf("push %s: %s", e.app, errOut)
			}
			app := kit.LastLine(out)

			old := serve(t, n, e, app)
			check := func(what, answer string, gen int, version string) {
				t.Helper()
				wants := []string{fmt.Sprintf("BREWLET_RUNTIME_GENERATION=%d", gen), e.pkg + "=" + version}
				if e.version != nil {
					wants = append(wants, e.version(version))
				}
				if e.path != "" {
					wants = append(wants, "PATH: "+e.path)
				}
				if e.app == "hello-java" {
					// The truststore built without running Java loads (go-pkcs12's encoding).
					if m := regexp.MustCompile(`trusted CAs: (\d+)`).FindStringSubmatch(answer); m == nil || len(m[1]) < 3 {
						t.Errorf("%s: the JVM's truststore did not load 100+ CAs:\n%s", what, answer)
					}
					wants = append(wants, "user: app")
				} else {
					wants = append(wants, fmt.Sprintf("uid: %d gid: %d", e.uid, e.uid))
				}
				for _, w := range wants {
					if !strings.Contains(answer, w) {
						t.Errorf("%s: answer lacks %q:\n%s", what, w, answer)
					}
				}
			}
			first := get(t, old)
			t.Logf("%s generation 1 answers:\n%s", e.id, first)
			check("generation 1", first, 1, rel)

			r2 := installGen(2, e.ref2)
			changed := changedLayers(r1.Generation.Layers, r2.Generation.Layers)
			if len(changed) != e.changed || r2.LayersFetched != len(changed) ||
				r2.LayersReused != len(r2.Generation.Layers)-len(changed) {
				t.Errorf("rotation fetched %d and reused %d layers; the manifests differ in %d of %d, want %d",
					r2.LayersFetched, r2.LayersReused, len(changed), len(r2.Generation.Layers), e.changed)
			}
			t.Logf("%s rotation %s → %s: %d of %d layers fetched, %d of %d bytes extracted", e.id, rel, upd,
				r2.LayersFetched, len(r2.Generation.Layers), r2.BytesFetched, r1.BytesFetched)
			fmt.Fprintf(&report, "| %s | %s %s → %s | %d of %d | %.1f MiB / %.1f MiB |\n", e.id, e.pkg, rel, upd,
				r2.LayersFetched, len(r2.Generation.Layers), float64(r2.BytesFetched)/(1<<20), float64(r1.BytesFetched)/(1<<20))

			patched := get(t, serve(t, n, e, app))
			check("a container started after the rotation", patched, 2, upd)
			check("the container started before the rotation", get(t, old), 1, rel)
		})
	}
	t.Log(report.String())
}

// serve starts a container of app on e's runtime in a new pod and returns its URL.
func serve(t *testing.T, n *framework.Node, e ecosystem, app string) string {
	t.Helper()
	ctx := context.Background()
	pod := n.PodConfig(e.app, map[string]string{vocab.AnnotationRuntimeImage: e.id})
	podID, err := n.RunPod(ctx, pod, vocab.RuntimeClassName)
	if err != nil {
		t.Fatalf("run pod: %v", err)
	}
	c := framework.ContainerConfig("app", app)
	c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
		RunAsUser: &runtimeapi.Int64Value{Value: e.uid}, RunAsGroup: &runtimeapi.Int64Value{Value: e.uid}}
	c.Envs = []*runtimeapi.KeyValue{{Key: "PATH", Value: []byte("/pod/set/this")}} // the runtime's PATH wins
	if _, err := n.CreateStart(ctx, podID, pod, c); err != nil {
		t.Fatalf("start %s: %v", e.app, err)
	}
	st, err := n.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil || st.Status.GetNetwork().GetIp() == "" {
		t.Fatalf("pod address: %v %+v", err, st)
	}
	return "http://" + st.Status.Network.Ip + ":8080/"
}

// get returns the body of a GET of url, retrying while the server starts (30 s at most).
func get(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				return string(b)
			}
			err = fmt.Errorf("%s: %v %s", resp.Status, rerr, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
