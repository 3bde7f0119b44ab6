package node

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/images"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// `make images` builds the operator and provisioner images for amd64 and arm64 without a
// container engine, pushes them and prints digest references; the amd64 images run on a
// real containerd + runc node.
func TestComponentImages(t *testing.T) {
	n := framework.StartNode(t)
	cmd := exec.Command("go", "run", "./hack/images", "--registry", n.Registry+"/brewlet", "--tag", "e2e", "--ca-file", framework.RegistryCAFile(t))
	cmd.Dir = framework.RepoRoot(t)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make images: %v\n%s", err, stderr.String())
	}
	t.Logf("images:\n%s", out)
	refs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		n, ref, _ := strings.Cut(line, " ")
		refs[n] = ref
	}
	for _, c := range images.Components {
		ref, ok := refs[c.Name]
		if !ok || !strings.Contains(ref, "@sha256:") {
			t.Fatalf("no digest reference printed for %s: %q", c.Name, out)
		}
		d, err := name.NewDigest(ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(d, framework.RegistryClient(t)...)
		if err != nil {
			t.Fatalf("%s is not an index: %v", ref, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var plats []string
		for _, m := range im.Manifests {
			plats = append(plats, m.Platform.OS+"/"+m.Platform.Architecture)
			img, err := idx.Image(m.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkComponentImage(t, c, *m.Platform, img)
		}
		slices.Sort(plats)
		if !slices.Equal(plats, []string{"linux/amd64", "linux/arm64"}) {
			t.Errorf("%s platforms = %v", c.Name, plats)
		}
		// The tag points at the same index.
		tagged, err := remote.Index(d.Context().Tag("e2e"), framework.RegistryClient(t)...)
		if err != nil {
			t.Fatal(err)
		}
		if td, _ := tagged.Digest(); td.String() != d.DigestStr() {
			t.Errorf("%s:e2e is %s, printed %s", c.Name, td, d.DigestStr())
		}
		// The amd64 image runs under runc on a real node (containerd picks the platform).
		logs := runOnce(t, n, ref, "/usr/local/bin/"+filepath.Base(c.Packages[0]), "--help")
		if !strings.Contains(logs, "-") {
			t.Errorf("%s --help printed nothing useful:\n%s", c.Name, logs)
		}
	}
	// Same sources and tag, same digest: a second build does not change what the chart pins.
	again := exec.Command("go", "run", "./hack/images", "--registry", n.Registry+"/brewlet", "--tag", "e2e", "--only", "brewlet-operator", "--ca-file", framework.RegistryCAFile(t))
	again.Dir = framework.RepoRoot(t)
	out2, err := again.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out2)); !strings.HasSuffix(refs["brewlet-operator"], strings.SplitN(got, "@", 2)[1]) {
		t.Errorf("rebuild changed the operator digest: %s vs %s", got, refs["brewlet-operator"])
	}
}

// checkComponentImage: the entrypoint and every packaged binary are executable files in
// /usr/local/bin, the config names the platform and the component's user.
func checkComponentImage(t *testing.T, c images.Component, p v1.Platform, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture || cf.Config.User != c.User ||
		len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/usr/local/bin/"+filepath.Base(c.Packages[0]) {
		t.Errorf("%s %s/%s config: os %s arch %s user %q entrypoint %v", c.Name, p.OS, p.Architecture, cf.OS, cf.Architecture, cf.Config.User, cf.Config.Entrypoint)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	var bundle []byte
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 && strings.HasPrefix(h.Name, "usr/local/bin/") {
				found[strings.TrimPrefix(h.Name, "usr/local/bin/")] = true
			}
			if h.Name == images.CABundlePath {
				bundle, err = io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		_ = rc.Close()
	}
	// The system authorities (Debian's ca-certificates, as packaged): registries with
	// public certificates are reached without any configuration.
	want, err := images.CABundle(images.DebianCADir)
	if err != nil {
		t.Fatal(err)
	}
	if pool := x509.NewCertPool(); !bytes.Equal(bundle, want) || !pool.AppendCertsFromPEM(bundle) || len(pool.Subjects()) < 100 { //nolint:staticcheck // counting, not verifying
		t.Errorf("%s %s/%s: /%s is not the packaged CA bundle (%d bytes, want %d)", c.Name, p.OS, p.Architecture, images.CABundlePath, len(bundle), len(want))
	}
	for _, pkg := range c.Packages {
		if !found[filepath.Base(pkg)] {
			t.Errorf("%s %s/%s lacks executable /usr/local/bin/%s (has %v)", c.Name, p.OS, p.Architecture, filepath.Base(pkg), found)
		}
	}
}

// runOnce runs an image's command to completion in a stock runc pod and returns its log.
func runOnce(t *testing.T, n *framework.Node, image string, cmd ...string) string {
	t.Helper()
	ctx := context.Background()
	pod := n.PodConfig("img-"+filepath.Base(cmd[0]), nil)
	podID, err := n.RunPod(ctx, pod, "runc")
	if err != nil {
		t.Fatal(err)
	}
	cid, err := n.CreateStart(ctx, podID, pod, framework.ContainerConfig("c", image, cmd...))
	if err != nil {
		t.Fatalf("run %s: %v", image, err)
	}
	code, log := kit.Exited(t, n, cid, pod, "c.log")
	if code != 0 {
		t.Fatalf("%s %v exited %d:\n%s", image, cmd, code, log)
	}
	return log
}
