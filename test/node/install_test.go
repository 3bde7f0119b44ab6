package node

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/gc"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/framework/testimage"
	"brewlet.sh/brewlet/test/kit"
)

// Installing a generation pulls by digest, extracts into the shared layer cache and flips
// current; a rotation to the interpreter's security update (generation 2: its own packages
// and the metadata layer changed, the base libraries not) fetches and extracts only the
// changed layers, and the old generation stays installed. A refused generation never
// becomes current.
func TestInstallGenerations(t *testing.T) {
	framework.RequireRoot(t)
	reg := framework.StartRegistry(t)
	refs := kit.BuildRuntimes(t, reg.Addr, "python")
	l := hoststate.Under(t.TempDir())
	in := &install.Installer{Layout: l, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}
	ctx := context.Background()
	req := func(gen int64, image string) install.Request {
		return install.Request{ID: "python-3.11", Epoch: "6f1c0d8e-7a8b-4c1d-9e2f-000000000001", Generation: gen,
			Image: image, UID: 10001, GID: 10001}
	}
	r1, err := in.Install(ctx, req(1, refs["python1"]))
	if err != nil {
		t.Fatalf("install generation 1: %v", err)
	}
	if r1.LayersFetched != 3 || r1.LayersReused != 0 {
		t.Fatalf("generation 1 fetched %d reused %d layers", r1.LayersFetched, r1.LayersReused)
	}
	if r1.Generation.Home != "/home/app" || !r1.Generation.HasPath || !strings.Contains(r1.Generation.Path, "/usr/bin") {
		t.Fatalf("generation metadata: %+v", r1.Generation)
	}
	// A container keeps using generation 1 through the rotation.
	if _, err := l.LeaseCurrent(hoststate.Lease{ContainerID: "c-on-gen1", ID: "python-3.11"}); err != nil {
		t.Fatal(err)
	}
	r2, err := in.Install(ctx, req(2, refs["python2"]))
	if err != nil {
		t.Fatalf("install generation 2: %v", err)
	}
	changed := changedLayers(r1.Generation.Layers, r2.Generation.Layers)
	if len(changed) != 2 || r2.LayersFetched != len(changed) || r2.LayersReused != len(r2.Generation.Layers)-len(changed) {
		t.Fatalf("rotation fetched %d and reused %d layers; the manifests differ in %d of %d", r2.LayersFetched, r2.LayersReused, len(changed), len(r2.Generation.Layers))
	}
	if r2.BytesFetched >= r1.BytesFetched/2 {
		t.Fatalf("rotation extracted %d bytes, generation 1 %d: the shared base layer was extracted again", r2.BytesFetched, r1.BytesFetched)
	}
	t.Logf("rotation %s -> %s: %d of %d layers, %d of %d bytes extracted", "python1", "python2",
		r2.LayersFetched, len(r2.Generation.Layers), r2.BytesFetched, r1.BytesFetched)
	cur, err := l.Current("python-3.11")
	if err != nil || cur.Generation != 2 {
		t.Fatalf("current = %v %v", cur, err)
	}
	if _, err := l.ReadGeneration("python-3.11", hoststate.Ref{Epoch: cur.Epoch, Generation: 1}); err != nil {
		t.Fatalf("generation 1 gone after rotation: %v", err)
	}
	// The generation's metadata is read-only.
	if fi, err := os.Stat(l.GenerationDir("python-3.11", cur.Epoch, 2)); err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("generation directory writable: %v %v", err, fi)
	}
	// The top layer of generation 2 carries its marker.
	top := l.LayerDir(strings.TrimPrefix(r2.Generation.Layers[len(r2.Generation.Layers)-1], "sha256:"))
	if b, err := os.ReadFile(filepath.Join(top, "etc/brewlet-runtime-release")); err != nil || !strings.Contains(string(b), "=2") {
		t.Fatalf("top layer content: %v %q", err, b)
	}

	t.Run("registry mirrors are tried first and the origin after them", func(t *testing.T) {
		// The origin (nothing listens on port 1) is down; the mirror serves the same digest.
		l2 := hoststate.Under(t.TempDir())
		origin := "127.0.0.1:1"
		image := origin + "/" + strings.SplitN(refs["python1"], "/", 2)[1]
		viaMirror := &install.Installer{Layout: l2, Trust: framework.RegistryTrust(t), Platform: in.Platform, Mirrors: map[string][]string{origin: {"127.0.0.1:2", reg.Addr}}}
		if _, err := viaMirror.Install(ctx, req(1, image)); err != nil {
			t.Fatalf("install through a mirror: %v", err)
		}
		noMirror := &install.Installer{Layout: hoststate.Under(t.TempDir()), Trust: framework.RegistryTrust(t), Platform: in.Platform}
		if _, err := noMirror.Install(ctx, req(1, image)); vocab.ReasonOf(err) != vocab.ReasonRuntimeImagePullFailed {
			t.Fatalf("origin down and no mirror: %v", err)
		}
		// A mirror that is down falls back to the origin.
		fallback := &install.Installer{Layout: hoststate.Under(t.TempDir()), Trust: framework.RegistryTrust(t), Platform: in.Platform,
			Mirrors: map[string][]string{reg.Addr: {"127.0.0.1:1"}}}
		if _, err := fallback.Install(ctx, req(1, refs["python1"])); err != nil {
			t.Fatalf("fallback to the origin: %v", err)
		}
	})

	t.Run("garbage collection keeps what is leased, current or within grace", func(t *testing.T) {
		collector := &gc.Collector{Layout: l, Grace: time.Hour, MountInfo: "/proc/self/mountinfo"}
		if got, err := collector.Collect(); err != nil || len(got.Generations)+len(got.Layers) != 0 {
			t.Fatalf("within grace: removed %+v (%v)", got, err)
		}
		collector.Grace = 0
		if got, err := collector.Collect(); err != nil || len(got.Generations)+len(got.Layers) != 0 {
			t.Fatalf("leased generation 1: removed %+v (%v)", got, err)
		}
		bad := filepath.Join(l.State, "leases", "garbled.json")
		if err := os.WriteFile(bad, []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := collector.Collect(); err == nil || len(got.Generations)+len(got.Layers) != 0 {
			t.Fatalf("an unreadable lease must keep everything: %+v %v", got, err)
		}
		_ = os.Remove(bad)
		if err := l.ReleaseLease("c-on-gen1"); err != nil {
			t.Fatal(err)
		}
		got, err := collector.Collect()
		// Generation 1 is what a rollback from generation 2 serves again (the newest older
		// generation with another digest): released, it stays with its own layers.
		if err != nil || len(got.Generations)+len(got.Layers) != 0 {
			t.Fatalf("after release: removed %+v (%v); want nothing: generation 1 is the rollback target", got, err)
		}
		if _, err := os.Stat(l.GenerationDir("python-3.11", r1.Generation.Epoch, 1)); err != nil {
			t.Fatalf("the rollback target was removed: %v", err)
		}
		if _, err := os.Stat(l.LayerDir(strings.TrimPrefix(r1.Generation.Layers[0], "sha256:"))); err != nil {
			t.Fatalf("shared base layer removed: %v", err)
		}
		if cur, err := l.Current("python-3.11"); err != nil || cur.Generation != 2 {
			t.Fatalf("current after GC: %v %v", cur, err)
		}
	})

	t.Run("refused generation never becomes current", func(t *testing.T) {
		bad := kit.PushRuntime(t, reg.Addr+"/runtimes/bad:1", []testimage.TarEntry{
			{Name: "etc/", Mode: 0o755, Typeflag: '5'},
			{Name: "etc/passwd", Mode: 0o644, Body: []byte("app:x:10001:10001::/home/app:/bin/sh\n")},
			{Name: "etc/group", Mode: 0o644, Body: []byte("app:x:10001:\n")},
			{Name: "su", Mode: 0o4755, Body: []byte("ELF")},
		}, nil)
		_, err := in.Install(ctx, req(3, bad))
		if vocab.ReasonOf(err) != vocab.ReasonPrivilegedRuntimeFile {
			t.Fatalf("setuid runtime: %v", err)
		}
		if cur, _ := l.Current("python-3.11"); cur.Generation != 2 {
			t.Fatalf("current moved to %v", cur)
		}
		_, err = in.Install(ctx, req(3, strings.Replace(refs["python2"], "@sha256:", ":2@sha256:", 1)))
		if vocab.ReasonOf(err) != vocab.ReasonInvalidImageReference {
			t.Fatalf("tag next to digest: %v", err)
		}
		arm := &install.Installer{Layout: l, Trust: framework.RegistryTrust(t), Platform: v1.Platform{OS: "linux", Architecture: "arm64"}}
		if _, err := arm.Install(ctx, req(3, refs["python2"])); vocab.ReasonOf(err) != vocab.ReasonPlatformUnavailable {
			t.Fatalf("wrong platform: %v", err)
		}
	})

	t.Run("a revoked runtime is removed from the node once unused", func(t *testing.T) {
		collector := &gc.Collector{Layout: l, MountInfo: "/proc/self/mountinfo"}
		if _, err := l.LeaseCurrent(hoststate.Lease{ContainerID: "still-running", ID: "python-3.11"}); err != nil {
			t.Fatal(err)
		}
		if err := l.WriteAuthorization(hoststate.Authorization{ID: "python-3.11", Revoked: true, Reason: "RuntimeImage deleted"}); err != nil {
			t.Fatal(err)
		}
		// Generation 1, the rollback target while the runtime was offered, goes with the
		// revocation; the leased generation 2 stays.
		gen1 := "python-3.11/" + r1.Generation.Epoch + "/1"
		if got, err := collector.Collect(); err != nil || !slices.Equal(got.Generations, []string{gen1}) {
			t.Fatalf("a revoked runtime with generation 2 leased: removed %+v %v; want generation 1 only", got, err)
		}
		if err := l.ReleaseLease("still-running"); err != nil {
			t.Fatal(err)
		}
		got, err := collector.Collect()
		if err != nil || len(got.Generations) != 1 || len(got.Layers) != len(r2.Generation.Layers) {
			t.Fatalf("revoked and unused: removed %+v (%v); want generation 2 and all its layers", got, err)
		}
		if _, err := l.Current("python-3.11"); vocab.ReasonOf(err) != vocab.ReasonRuntimeImageNotInstalled {
			t.Fatalf("current pointer left: %v", err)
		}
		if a, err := l.ReadAuthorization("python-3.11"); err != nil || !a.Revoked {
			t.Fatalf("the revoked authorization must stay: %+v %v", a, err)
		}
	})
}

// changedLayers returns the layers of to (digests, "sha256:" trimmed) that from lacks: what a
// rotation from one generation to the other fetches.
func changedLayers(from, to []string) []string {
	have := map[string]bool{}
	for _, l := range from {
		have[l] = true
	}
	var out []string
	for _, l := range to {
		if !have[l] {
			out = append(out, strings.TrimPrefix(l, "sha256:"))
		}
	}
	return out
}

// The provisioner pulls from a registry that requires credentials with the Docker config
// file the agent is given (a mounted pull secret), and is refused without it.
func TestInstallWithRegistryCredentials(t *testing.T) {
	framework.RequireRoot(t)
	reg := framework.StartRegistryWith(t, "puller", "s3cret-pass")
	ref, err := testimage.Push(kit.ShellImage(t), reg.Addr+"/runtimes/private:1", reg.Access().Options()...)
	if err != nil {
		t.Fatalf("push with credentials: %v", err)
	}
	req := install.Request{ID: "private", Epoch: "7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c5d", Generation: 1, Image: ref, UID: 10001, GID: 10001}
	platform := v1.Platform{OS: "linux", Architecture: "amd64"}

	home := t.TempDir()
	t.Setenv("HOME", home) // no ~/.docker/config.json of the machine's own
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	in := &install.Installer{Layout: hoststate.Under(t.TempDir()), Trust: framework.RegistryTrust(t), Platform: platform}
	if _, err := in.Install(context.Background(), req); vocab.ReasonOf(err) != vocab.ReasonRegistryCredentialsRefused || !strings.Contains(err.Error(), reg.Addr) {
		t.Fatalf("install without credentials: %v; want RegistryCredentialsRefused naming %s", err, reg.Addr)
	}
	cfg := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("puller:s3cret-pass"))
	if err := os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"auths":{"`+reg.Addr+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", cfg)
	if _, err := in.Install(context.Background(), req); err != nil {
		t.Fatalf("install with credentials: %v", err)
	}
}
