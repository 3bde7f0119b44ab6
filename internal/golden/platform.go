package golden

import (
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

// SelectPlatform picks the manifest of an image index that serves a node's platform. A
// runtime image that lacks the node's platform is refused, never substituted.
func SelectPlatform(idx *v1.IndexManifest, want v1.Platform) (v1.Descriptor, error) {
	var offered []string
	for _, m := range idx.Manifests {
		if m.Platform == nil {
			continue
		}
		offered = append(offered, m.Platform.String())
		if m.Platform.OS == want.OS && m.Platform.Architecture == want.Architecture &&
			(want.Variant == "" || m.Platform.Variant == want.Variant) {
			return m, nil
		}
	}
	return v1.Descriptor{}, vocab.Errorf(vocab.ReasonPlatformUnavailable,
		"the runtime image index offers %s but this node needs %s; publish the runtime for %s or keep it off this pool",
		strings.Join(offered, ", "), want.String(), want.String())
}
