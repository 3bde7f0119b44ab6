package artifact

import (
	"archive/tar"
	"context"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

// LayerInfo describes one artifact layer.
type LayerInfo struct {
	Role      string `json:"role"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	MediaType string `json:"mediaType"`
}

// Report is what `brewlet inspect` shows for one platform's manifest.
type Report struct {
	Digest   string      `json:"digest"`
	Platform string      `json:"platform"`
	Layers   []LayerInfo `json:"layers"`
	Launch   *Launch     `json:"launch"`
}

func unsupported(format string, args ...any) error {
	return vocab.Errorf(vocab.ReasonUnsupportedArtifact, format+"; build it with 'brewlet push'", args...)
}

// Inspect recognizes an artifact image and reads its launch descriptor. It checks the
// structure (annotations, layer roles, launch layer last and alone) but not the content
// rules; Verify does both.
func Inspect(img v1.Image) (*Report, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	infos, err := CheckManifest(m)
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	if len(layers) != len(m.Layers) {
		return nil, unsupported("the manifest lists %d layers but the image has %d", len(m.Layers), len(layers))
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	d, _ := img.Digest()
	rep := &Report{Digest: d.String(), Platform: cf.Platform().String(), Layers: infos}
	rc, err := layers[len(layers)-1].Uncompressed()
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	if rep.Launch, err = ReadLaunchLayer(rc); err != nil {
		return nil, err
	}
	return rep, nil
}

// CheckManifest recognizes an artifact manifest: version annotation, at least one app
// layer, and exactly one launch layer, last. It is shared by the CLI and the shim.
func CheckManifest(m *v1.Manifest) ([]LayerInfo, error) {
	if v := m.Annotations[vocab.AnnotationArtifactVersion]; v != vocab.ArtifactVersion {
		return nil, unsupported("manifest annotation %s is %q, not %q: this is not a Brewlet application artifact of this version", vocab.AnnotationArtifactVersion, v, vocab.ArtifactVersion)
	}
	if len(m.Layers) < 2 {
		return nil, unsupported("an artifact has at least one app layer and a launch layer; this one has %d layers", len(m.Layers))
	}
	var out []LayerInfo
	apps := 0
	for i, desc := range m.Layers {
		role := desc.Annotations[vocab.AnnotationLayer]
		last := i == len(m.Layers)-1
		switch {
		case last && role != vocab.LayerLaunch:
			return nil, unsupported("the last layer is %q; it must be the launch layer", role)
		case !last && role == vocab.LayerLaunch:
			return nil, unsupported("layer %d is a launch layer but not the last one", i+1)
		case role == vocab.LayerApp:
			apps++
		case role != vocab.LayerDependency && role != vocab.LayerLaunch:
			return nil, unsupported("layer %d has %s=%q; roles are app, dependency and launch", i+1, vocab.AnnotationLayer, role)
		}
		out = append(out, LayerInfo{Role: role, Digest: desc.Digest.String(), Size: desc.Size, MediaType: string(desc.MediaType)})
	}
	if apps == 0 {
		return nil, unsupported("no layer is annotated %s=app", vocab.AnnotationLayer)
	}
	return out, nil
}

// ReadLaunchLayer reads the launch layer: exactly one regular file, launch.json, at the root.
func ReadLaunchLayer(r io.Reader) (*Launch, error) {
	tr := tar.NewReader(r)
	h, err := tr.Next()
	if err != nil {
		return nil, unsupported("launch layer is not a readable tar: %v", err)
	}
	if h.Name != LaunchFile || h.Typeflag != tar.TypeReg {
		return nil, unsupported("launch layer holds %q; it must hold only %s at the archive root", h.Name, LaunchFile)
	}
	body, err := io.ReadAll(io.LimitReader(tr, MaxLaunchSize+1))
	if err != nil {
		return nil, err
	}
	if _, err := tr.Next(); err != io.EOF {
		return nil, unsupported("launch layer holds more than %s", LaunchFile)
	}
	return ParseLaunch(body)
}

// Verify applies every rule to an artifact image: structure, launch.json, the config
// mirror, and the layer content rules on the composed app and dependency layers.
func Verify(img v1.Image) (*Report, error) {
	rep, err := Inspect(img)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	if err := CheckConfigMirror(rep.Launch, cf.Config); err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	var readers []io.Reader
	var names []string
	for i, l := range layers[:len(layers)-1] {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", rep.Layers[i].Digest, err)
		}
		defer func() { _ = rc.Close() }()
		readers = append(readers, rc)
		names = append(names, fmt.Sprintf("%s layer %d (%s)", rep.Layers[i].Role, i+1, rep.Layers[i].Digest))
	}
	if err := ValidateTarLayers(context.Background(), readers, names, DefaultLimits()); err != nil {
		return nil, err
	}
	return rep, nil
}
