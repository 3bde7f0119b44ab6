package node

import (
	"archive/tar"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/framework/testimage"
	"brewlet.sh/brewlet/test/kit"
)

// A distroless runtime (no PATH, no account files) runs an absolute entrypoint as the
// numeric non-root user with no PATH at all, and /app content shipped in the runtime image
// is never visible to the application.
func TestDistrolessRuntimeAndHiddenRuntimeApp(t *testing.T) {
	n := framework.StartNode(t)
	host := hoststate.Under(n.HostPrefix)
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	rt := kit.PushRuntime(t, n.Registry+"/runtimes/distroless:1", []testimage.TarEntry{
		{Name: "bin/", Mode: 0o755, Typeflag: tar.TypeDir},
		{Name: "bin/busybox", Mode: 0o755, Body: bb},
		{Name: "app/", Mode: 0o755, Typeflag: tar.TypeDir},
		{Name: "app/runtime-secret", Mode: 0o644, Body: []byte("must not be seen")},
		{Name: "app/src/", Mode: 0o755, Typeflag: tar.TypeDir},
		{Name: "app/src/from-runtime", Mode: 0o644, Body: []byte("must not be seen either")},
	}, nil)
	const id, epoch = "static", "5b2d7c9e-0a1f-4e3b-8c6d-1f2e3d4c5b6a"
	in := &install.Installer{Layout: host, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}
	g, err := in.Install(context.Background(), install.Request{ID: id, Epoch: epoch, Generation: 1, Image: rt, UID: 20001, GID: 20002})
	if err != nil {
		t.Fatal(err)
	}
	if g.Generation.HasPath || g.Generation.Home != "" {
		t.Fatalf("distroless generation has PATH or HOME: %+v", g.Generation)
	}
	if err := host.OpenFence(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := host.WriteAuthorization(hoststate.Authorization{ID: id, Epoch: epoch, Generation: 1, ConfirmedAt: now, ExpiresAt: now.Add(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	cli := kit.BuildCLI(t)
	src := t.TempDir()
	kit.WriteTree(t, src, map[string]string{"mine": "app file\n"})
	out, errOut, code := kit.Brewlet(t, cli, "push", n.Registry+"/apps/static:1", "--layer", "app="+src+":/app/src",
		"--entrypoint", "/bin/busybox", "--arg", "sh", "--arg", "-c",
		"--arg", `echo uid=$(/bin/busybox id -u) gid=$(/bin/busybox id -g); /bin/busybox ls -R /app; /bin/busybox tr '\0' '\n' < /proc/$$/environ`)
	if code != 0 {
		t.Fatalf("push: %s", errOut)
	}
	app := kit.LastLine(out)
	ctx := context.Background()
	pod := n.PodConfig("static", map[string]string{vocab.AnnotationRuntimeImage: id})
	podID, err := n.RunPod(ctx, pod, vocab.RuntimeClassName)
	if err != nil {
		t.Fatal(err)
	}
	c := framework.ContainerConfig("app", app)
	c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
		RunAsUser: &runtimeapi.Int64Value{Value: 20001}, RunAsGroup: &runtimeapi.Int64Value{Value: 20002}}
	cid, err := n.CreateStart(ctx, podID, pod, c)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	d := &kit.DataPath{N: n}
	log := d.Output(t, cid, pod)
	if !strings.Contains(log, "uid=20001 gid=20002") {
		t.Errorf("not the numeric runtime user:\n%s", log)
	}
	if !strings.Contains(log, "mine") || strings.Contains(log, "runtime-secret") || strings.Contains(log, "from-runtime") {
		t.Errorf("runtime /app content visible or app content missing:\n%s", log)
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, " PATH=") {
			t.Errorf("a PATH reached the process of a runtime without one: %s", l)
		}
	}
}
