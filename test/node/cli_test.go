package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/artifact/ociimage"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/framework/testimage"
	"brewlet.sh/brewlet/test/kit"
)

func TestCLIPushInspectVerify(t *testing.T) {
	reg := framework.StartRegistry(t)
	bin := kit.BuildCLI(t)
	src, deps := t.TempDir(), t.TempDir()
	kit.WriteTree(t, src, map[string]string{"app/__main__.py": "print('hello')\n", "app/util.py": "X = 1\n"})
	kit.WriteTree(t, deps, map[string]string{"requests/__init__.py": "\n"})
	push := func(tag string, extra ...string) (string, string, int) {
		args := append([]string{"push", reg.Addr + "/shop/api:" + tag,
			"--layer", "dependency=" + deps + ":/app/lib", "--layer", "app=" + src + ":/app/src",
			"--entrypoint", "python", "--arg", "-m", "--arg", "app",
			"--env", "PYTHONPATH=/app/src:/app/lib", "--requires-runtime", "python-3.12"}, extra...)
		return kit.Brewlet(t, bin, args...)
	}
	out, errOut, code := push("1")
	if code != 0 {
		t.Fatalf("push exit %d: %s", code, errOut)
	}
	ref := kit.LastLine(out)
	if !strings.HasPrefix(ref, reg.Addr+"/shop/api@sha256:") {
		t.Fatalf("push did not print REF@sha256: %q", out)
	}

	t.Run("deterministic", func(t *testing.T) {
		// New modification times and a second tag: same digest.
		later := time.Now().Add(time.Hour)
		_ = os.Chtimes(filepath.Join(src, "app/util.py"), later, later)
		out, errOut, code := push("again")
		if code != 0 || kit.LastLine(out) != ref {
			t.Fatalf("second push gave %q (exit %d, %s); want %q", kit.LastLine(out), code, errOut, ref)
		}
	})

	t.Run("inspect", func(t *testing.T) {
		out, errOut, code := kit.Brewlet(t, bin, "inspect", ref)
		if code != 0 {
			t.Fatalf("inspect: %s", errOut)
		}
		for _, want := range []string{"dependency", "app", "launch", `entrypoint ["python"]`, "requires   python-3.12", "PYTHONPATH=/app/src:/app/lib"} {
			if !strings.Contains(out, want) {
				t.Errorf("inspect output lacks %q:\n%s", want, out)
			}
		}
		out, _, code = kit.Brewlet(t, bin, "inspect", "--json", ref)
		var reps []artifact.Report
		if code != 0 || json.Unmarshal([]byte(out), &reps) != nil || len(reps) != 1 {
			t.Fatalf("inspect --json: %d %q", code, out)
		}
		roles := []string{}
		for _, l := range reps[0].Layers {
			roles = append(roles, l.Role)
		}
		if strings.Join(roles, ",") != "dependency,app,launch" {
			t.Fatalf("layer roles %v", roles)
		}
	})

	t.Run("verify", func(t *testing.T) {
		if out, errOut, code := kit.Brewlet(t, bin, "verify", ref); code != 0 || !strings.HasPrefix(out, "ok") {
			t.Fatalf("verify of a good artifact: %d %s %s", code, out, errOut)
		}
	})

	t.Run("several platforms make an index", func(t *testing.T) {
		out, errOut, code := push("multi", "--platform", "linux/amd64", "--platform", "linux/arm64")
		if code != 0 {
			t.Fatalf("push: %s", errOut)
		}
		d, err := name.NewDigest(kit.LastLine(out), name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Get(d, framework.RegistryClient(t)...)
		if err != nil || desc.MediaType != types.OCIImageIndex {
			t.Fatalf("not an index: %v %v", err, desc)
		}
		out, _, code = kit.Brewlet(t, bin, "verify", kit.LastLine(out))
		if code != 0 || strings.Count(out, "ok ") != 2 || !strings.Contains(out, "linux/arm64") {
			t.Fatalf("verify index: %d %s", code, out)
		}
	})

	t.Run("hostile layer refused before anything is pushed", func(t *testing.T) {
		bad := t.TempDir()
		kit.WriteTree(t, bad, map[string]string{"run.sh": "#!/bin/sh\n"})
		if err := os.Chmod(filepath.Join(bad, "run.sh"), 0o755|os.ModeSetuid); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := kit.Brewlet(t, bin, "push", reg.Addr+"/shop/bad:1", "--layer", "app="+bad+":/app", "--entrypoint", "/app/run.sh")
		if code != 1 || !strings.Contains(errOut, "LayerPathViolation") || !strings.Contains(errOut, "app/run.sh") {
			t.Fatalf("setuid layer: exit %d: %s", code, errOut)
		}
		badRef, err := name.ParseReference(reg.Addr+"/shop/bad:1", name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := remote.Head(badRef, framework.RegistryClient(t)...); err == nil {
			t.Fatal("a refused artifact was pushed")
		}
		_, errOut, code = kit.Brewlet(t, bin, "push", reg.Addr+"/shop/bad:1", "--layer", "app="+bad+":/etc", "--entrypoint", "x")
		if code != 1 || !strings.Contains(errOut, "LayerPathViolation") {
			t.Fatalf("destination outside /app: exit %d: %s", code, errOut)
		}
		_, errOut, code = kit.Brewlet(t, bin, "push", reg.Addr+"/shop/bad:1", "--layer", "app="+src+":/app", "--entrypoint", "x", "--env", "PATH=/x")
		if code != 1 || !strings.Contains(errOut, "InvalidLaunchConfig") {
			t.Fatalf("PATH in env: exit %d: %s", code, errOut)
		}
	})

	t.Run("verify refuses a hostile or foreign image with its reason", func(t *testing.T) {
		hostile := pushHandmade(t, reg.Addr+"/shop/hostile:1", map[string]string{"etc/passwd": "root::0:0::/:/bin/sh\n"})
		_, errOut, code := kit.Brewlet(t, bin, "verify", hostile)
		if code != 1 || !strings.Contains(errOut, "LayerPathViolation") || !strings.Contains(errOut, "etc") {
			t.Fatalf("verify hostile: exit %d: %s", code, errOut)
		}
		bb, err := testimage.BusyboxLayer()
		if err != nil {
			t.Fatal(err)
		}
		img, err := testimage.Image(v1.Config{Cmd: []string{"sh"}}, bb)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := testimage.Push(img, reg.Addr+"/plain/busybox:1", framework.RegistryClient(t)...)
		if err != nil {
			t.Fatal(err)
		}
		_, errOut, code = kit.Brewlet(t, bin, "verify", plain)
		if code != 1 || !strings.Contains(errOut, string(vocab.ReasonUnsupportedArtifact)) {
			t.Fatalf("verify non-artifact: exit %d: %s", code, errOut)
		}
	})
}

// pushHandmade pushes a structurally valid artifact whose app layer holds the given
// files, bypassing the CLI's own validation, as a hostile producer would.
func pushHandmade(t *testing.T, ref string, files map[string]string) string {
	t.Helper()
	var entries []testimage.TarEntry
	for p, body := range files {
		entries = append(entries, testimage.TarEntry{Name: p, Mode: 0o644, Body: []byte(body)})
	}
	return pushHandmadeEntries(t, ref, entries)
}

// pushHandmadeEntries is pushHandmade with full control over the app layers' entries
// (one layer per argument, lowest first).
func pushHandmadeEntries(t *testing.T, ref string, layers ...[]testimage.TarEntry) string {
	t.Helper()
	return pushCrafted(t, ref, nil, vocab.ArtifactVersion, layers...)
}

// pushCrafted pushes an artifact whose config can differ from its launch.json and whose
// version annotation is given, as a buggy or hostile producer would.
func pushCrafted(t *testing.T, ref string, mutateConfig func(*v1.Config), version string, layers ...[]testimage.TarEntry) string {
	t.Helper()
	l := &artifact.Launch{SchemaVersion: 2, Process: artifact.Process{Entrypoint: []string{"sh"}, WorkingDir: "/app"}}
	launchTar, err := artifact.LaunchLayerTar(l)
	if err != nil {
		t.Fatal(err)
	}
	cfg := artifact.ImageConfig(l)
	if mutateConfig != nil {
		mutateConfig(&cfg)
	}
	img, err := testimage.Image(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type roleTar struct {
		role string
		b    []byte
	}
	var all []roleTar
	for _, entries := range layers {
		b, err := testimage.LayerTar(entries)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, roleTar{"app", b})
	}
	for _, rl := range append(all, roleTar{"launch", launchTar}) {
		layer, err := ociimage.OCILayer(rl.b)
		if err != nil {
			t.Fatal(err)
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
			Annotations: map[string]string{vocab.AnnotationLayer: rl.role}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if version != "" {
		img = mutate.Annotations(img, map[string]string{vocab.AnnotationArtifactVersion: version}).(v1.Image)
	}
	out, err := testimage.Push(img, ref, framework.RegistryClient(t)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCLIRuntimeBuild(t *testing.T) {
	reg := framework.StartRegistry(t)
	bin := kit.BuildCLI(t)
	root := t.TempDir()
	kit.WriteTree(t, root, map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\napp:x:10001:10001::/home/app:/bin/false\n",
		"etc/group":  "root:x:0:\napp:x:10001:\n",
		"bin/tool":   "#!/bin/sh\n",
	})
	if err := os.MkdirAll(filepath.Join(root, "home/app"), 0o755); err != nil {
		t.Fatal(err)
	}
	build := func(extra ...string) (string, string, int) {
		return kit.Brewlet(t, bin, append([]string{"runtime", "build", reg.Addr + "/runtimes/tiny:1", "--rootfs", root,
			"--uid", "10001", "--gid", "10001"}, extra...)...)
	}
	out, errOut, code := build("--env", "PATH=/bin")
	if code != 0 || !strings.HasPrefix(kit.LastLine(out), reg.Addr+"/runtimes/tiny@sha256:") {
		t.Fatalf("runtime build: exit %d: %s %s", code, out, errOut)
	}
	if again, _, _ := build("--env", "PATH=/bin"); kit.LastLine(again) != kit.LastLine(out) {
		t.Fatalf("runtime build not deterministic: %q vs %q", kit.LastLine(again), kit.LastLine(out))
	}
	for _, tc := range []struct {
		args   []string
		reason vocab.Reason
	}{
		{[]string{"--env", "PATH=/bin:/usr/bin"}, vocab.ReasonInvalidRuntimePath},
		{[]string{"--env", "PATH=bin"}, vocab.ReasonInvalidRuntimePath},
		{[]string{"--uid", "10002"}, vocab.ReasonInvalidAccountFiles},
	} {
		if _, errOut, code := build(tc.args...); code != 1 || !strings.Contains(errOut, string(tc.reason)) {
			t.Errorf("runtime build %v: exit %d, want %s: %s", tc.args, code, tc.reason, errOut)
		}
	}
	if err := os.Chmod(filepath.Join(root, "bin/tool"), 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := build(); code != 1 || !strings.Contains(errOut, string(vocab.ReasonPrivilegedRuntimeFile)) {
		t.Errorf("setuid runtime file: exit %d: %s", code, errOut)
	}
}
