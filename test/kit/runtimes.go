package kit

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/signature"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/framework/testimage"
)

const PyID = "python-3.11"

const helloPy = `import os, sys
print("exe", sys.executable)
print("uid", os.getuid(), "gid", os.getgid())
print("path", os.environ.get("PATH"))
print("home", os.environ.get("HOME"))
print("release", open("/etc/brewlet-runtime-release").read().strip())
print("appfiles", sorted(os.listdir("/app")))
`

// PushHello pushes the Python app that reports its interpreter, identity and runtime.
func PushHello(t *testing.T, cli, registry string, extra ...string) string {
	t.Helper()
	src := t.TempDir()
	WriteTree(t, src, map[string]string{"hello/__main__.py": helloPy})
	out, errOut, code := Brewlet(t, cli, append([]string{"push", registry + "/apps/hello:1", "--layer", "app=" + src + ":/app/src",
		"--entrypoint", "python", "--arg", "-m", "--arg", "hello", "--env", "PYTHONPATH=/app/src"}, extra...)...)
	if code != 0 {
		t.Fatalf("push app: %s", errOut)
	}
	return LastLine(out)
}

// ShellImage is a small runtime image (static busybox) every install test can pass.
func ShellImage(t *testing.T) v1.Image {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		framework.Unavailable(t, "static busybox (Debian package busybox-static): %v", err)
	}
	layer, err := testimage.LayerTar([]testimage.TarEntry{{Name: "bin/", Mode: 0o755, Typeflag: '5'}, {Name: "bin/busybox", Mode: 0o755, Body: bb}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := testimage.Image(v1.Config{}, layer)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

var LinuxAMD64 = v1.Platform{OS: "linux", Architecture: "amd64"}

// PushRuntime pushes a single-layer runtime image built without the CLI's validation.
func PushRuntime(t *testing.T, ref string, entries []testimage.TarEntry, env []string) string {
	t.Helper()
	layer, err := testimage.LayerTar(entries)
	if err != nil {
		t.Fatal(err)
	}
	img, err := testimage.Image(v1.Config{Env: env}, layer)
	if err != nil {
		t.Fatal(err)
	}
	out, err := testimage.Push(img, ref, framework.RegistryClient(t)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// WithFile is img with one more layer holding a file: another generation of a runtime.
func WithFile(t *testing.T, img v1.Image, name, body string) v1.Image {
	t.Helper()
	tarb, err := testimage.LayerTar([]testimage.TarEntry{{Name: name, Mode: 0o644, Body: []byte(body)}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarb)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	out, err := mutate.AppendLayers(img, l)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// SignWith attaches s's signature of digest to ref (a digest reference) in reg.
func SignWith(t *testing.T, reg *framework.Registry, s *signature.Signer, ref, digest, user, password string) {
	t.Helper()
	d, err := registry.Digest(ref, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Bundle(digest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signature.Attach(context.Background(), d, b, remote.WithTransport(reg.Transport()),
		remote.WithAuth(&authn.Basic{Username: user, Password: password})); err != nil {
		t.Fatalf("sign %s: %v", ref, err)
	}
}
