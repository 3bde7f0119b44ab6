// Package testimage builds small OCI images for tests (layers from tar entries, busybox
// from the machine's static binary) and pushes them to the harness's registry.
package testimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TarEntry is one entry of a layer built in memory.
type TarEntry struct {
	Name     string
	Mode     int64
	Body     []byte
	Linkname string // symlink target when Typeflag is tar.TypeSymlink
	Typeflag byte   // 0 means a regular file
	Devmajor int64  // device numbers for tar.TypeChar and tar.TypeBlock
	Devminor int64
}

// LayerTar builds an uncompressed layer with fixed ownership and timestamps.
func LayerTar(entries []TarEntry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Mode: e.Mode, Typeflag: e.Typeflag, Linkname: e.Linkname,
			Devmajor: e.Devmajor, Devminor: e.Devminor, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.Body); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Image builds a single-platform (linux/amd64) OCI image from uncompressed layers.
func Image(cfg v1.Config, layers ...[]byte) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		data := l
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", "amd64", cfg
	return mutate.ConfigFile(img, cf)
}

// BusyboxLayer is a root filesystem of Debian's static busybox with its applet links.
func BusyboxLayer() ([]byte, error) {
	const bb = "/bin/busybox"
	body, err := os.ReadFile(bb)
	if err != nil {
		return nil, fmt.Errorf("read %s (Debian package busybox-static): %w", bb, err)
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", bb, err)
	}
	entries := []TarEntry{
		{Name: "bin/", Mode: 0o755, Typeflag: tar.TypeDir},
		{Name: "bin/busybox", Mode: 0o755, Body: body},
		{Name: "etc/", Mode: 0o755, Typeflag: tar.TypeDir},
		{Name: "tmp/", Mode: 0o1777, Typeflag: tar.TypeDir},
	}
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" { // a self-link would replace the binary
			entries = append(entries, TarEntry{Name: "bin/" + a, Mode: 0o777, Typeflag: tar.TypeSymlink, Linkname: "busybox"})
		}
	}
	return LayerTar(entries)
}

// Push writes an image to a loopback registry and returns its repo@digest reference.
func Push(img v1.Image, ref string, opts ...remote.Option) (string, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(r, img, opts...); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return r.Context().Name() + "@" + d.String(), nil
}
