// Package images builds Brewlet's own component images (operator, provisioner) from this
// module's Go binaries with go-containerregistry: no container engine, no base image, the
// same digest for the same sources and Go toolchain.
package images

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/artifact/ociimage"
	"brewlet.sh/brewlet/internal/registry"
)

// Component is one image Brewlet ships.
type Component struct {
	// Name is the image's repository name below the registry prefix.
	Name string
	// Packages are the Go main packages put in /usr/local/bin; the first is the entrypoint.
	Packages []string
	// User the entrypoint runs as. The operator needs nothing of the host and runs as a
	// fixed non-root user; the provisioner changes the host (containerd config, shim
	// binary, runtime roots) and runs as root in a privileged pod.
	User string
}

// NonRootUser is the operator's identity, with an account in the image's /etc/passwd.
const NonRootUser = "65532:65532"

// Components are the images `make images` builds. The provisioner image carries the shim,
// which the provisioner copies onto the node.
var Components = []Component{
	{Name: "brewlet-operator", Packages: []string{"./cmd/brewlet-operator"}, User: NonRootUser},
	{Name: "brewlet-provisioner", Packages: []string{"./cmd/brewlet-provisioner", "./cmd/containerd-shim-brewlet-v2"}, User: "0:0"},
}

// DefaultPlatforms are the platforms of every component index.
var DefaultPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// Builder compiles components in ModuleDir.
type Builder struct {
	ModuleDir string
	CADir     string       // the authorities put in the images' bundle ("": DebianCADir)
	Version   string       // stamped into the image label org.opencontainers.image.version
	Progress  func(string) // one line per step (nil: silent)
}

// Build returns the component's image index, one image per platform.
func (b Builder) Build(ctx context.Context, c Component, platforms []v1.Platform) (v1.ImageIndex, error) {
	if len(c.Packages) == 0 || len(platforms) == 0 {
		return nil, fmt.Errorf("component %q: no packages or platforms", c.Name)
	}
	bundle, err := CABundle(cmp.Or(b.CADir, DebianCADir))
	if err != nil {
		return nil, err
	}
	imgs := make([]v1.Image, 0, len(platforms))
	for _, p := range platforms {
		img, err := b.image(ctx, c, p, bundle)
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	return ociimage.BuildIndex(imgs, platforms), nil
}

func (b Builder) image(ctx context.Context, c Component, p v1.Platform, bundle []byte) (v1.Image, error) {
	root, err := os.MkdirTemp("", "brewlet-image-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(root) }()
	bin := filepath.Join(root, "bin")
	for _, pkg := range c.Packages {
		b.progress(fmt.Sprintf("%s %s/%s: go build %s", c.Name, p.OS, p.Architecture, pkg))
		if err := b.compile(ctx, pkg, p, filepath.Join(bin, filepath.Base(pkg))); err != nil {
			return nil, fmt.Errorf("%s for %s/%s: %w", pkg, p.OS, p.Architecture, err)
		}
	}
	binTar, err := artifact.TreeTar(bin, "usr/local/bin")
	if err != nil {
		return nil, err
	}
	etc := filepath.Join(root, "etc")
	if err := writeAccounts(etc); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(root, CABundlePath), bundle); err != nil {
		return nil, err
	}
	etcTar, err := artifact.TreeTar(etc, "etc")
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, t := range [][]byte{etcTar, binTar} { // binaries last: they change most often
		l, err := ociimage.OCILayer(t)
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config = v1.Config{
		Entrypoint: []string{"/usr/local/bin/" + filepath.Base(c.Packages[0])},
		User:       c.User,
		Env:        []string{"PATH=/usr/local/bin"},
		Labels: map[string]string{
			"org.opencontainers.image.title":   c.Name,
			"org.opencontainers.image.version": b.Version,
			"org.opencontainers.image.source":  "brewlet.sh/brewlet",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// compile builds one static binary: CGO off (the images have no libc), paths trimmed and
// no VCS stamp, so the same sources give the same bytes on any machine.
func (b Builder) compile(ctx context.Context, pkg string, p v1.Platform, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = b.ModuleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if v := strings.TrimPrefix(p.Variant, "v"); p.Architecture == "arm" && v != "" {
		cmd.Env = append(cmd.Env, "GOARM="+v)
	}
	if outb, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, outb)
	}
	return nil
}

// writeAccounts gives the image account files naming root and the non-root user, so tools
// that resolve the user (ps, log lines, kubectl debug) see names rather than numbers.
func writeAccounts(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
		"group":  "root:x:0:\nnonroot:x:65532:\n",
	}
	for n, s := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(s), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func (b Builder) progress(s string) {
	if b.Progress != nil {
		b.Progress(s)
	}
}

// Push writes an index as repo:tag and returns its digest reference (repo@sha256:...), the
// form the chart pins.
func Push(ctx context.Context, idx v1.ImageIndex, repo, tag string, insecure bool, extra ...remote.Option) (string, error) {
	ref, err := registry.Reference(repo+":"+tag, insecure)
	if err != nil {
		return "", err
	}
	if err := remote.WriteIndex(ref, idx, registry.Options(ctx, insecure, extra...)...); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return "", err
	}
	return ref.Context().Digest(d.String()).String(), nil
}
