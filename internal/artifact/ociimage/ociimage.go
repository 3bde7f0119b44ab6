// Package ociimage assembles artifact images (go-containerregistry's mutate and tarball
// packages, with their compressors). It is apart from internal/artifact, whose checks the
// shim links, so that a shim in every pod does not carry the image-building code.
package ociimage

import (
	"bytes"
	"context"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/vocab"
)

// RoleLayer is an uncompressed layer with its role.
type RoleLayer struct {
	Role string
	Tar  []byte
}

// OCILayer compresses a tar deterministically.
func OCILayer(b []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(artifact.CompressionLevel))
}

// BuildImage assembles a validated artifact image for one platform: app and dependency
// layers in the given order, then the launch layer, with the config mirroring launch.json.
func BuildImage(layers []RoleLayer, l *artifact.Launch, platform v1.Platform) (v1.Image, error) {
	var readers []io.Reader
	for _, rl := range layers {
		readers = append(readers, bytes.NewReader(rl.Tar))
	}
	if err := artifact.ValidateTarLayers(context.Background(), readers, nil, artifact.DefaultLimits()); err != nil {
		return nil, err
	}
	launchTar, err := artifact.LaunchLayerTar(l)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	all := append(append([]RoleLayer{}, layers...), RoleLayer{Role: vocab.LayerLaunch, Tar: launchTar})
	for _, rl := range all {
		layer, err := OCILayer(rl.Tar)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
			Annotations: map[string]string{vocab.AnnotationLayer: rl.Role}})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = platform.OS, platform.Architecture, platform.Variant
	cf.Config = artifact.ImageConfig(l)
	cf.Created = v1.Time{Time: artifact.FixedTime}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, map[string]string{vocab.AnnotationArtifactVersion: vocab.ArtifactVersion}).(v1.Image), nil
}

// BuildIndex wraps per-platform images in an OCI index.
func BuildIndex(imgs []v1.Image, platforms []v1.Platform) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i, img := range imgs {
		p := platforms[i]
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx
}
