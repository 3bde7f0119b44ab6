package golden

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

func TestSelectPlatform(t *testing.T) {
	idx := &v1.IndexManifest{Manifests: []v1.Descriptor{
		{Digest: v1.Hash{Algorithm: "sha256", Hex: "aa"}, Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}},
		{Digest: v1.Hash{Algorithm: "sha256", Hex: "bb"}, Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}},
		{Digest: v1.Hash{Algorithm: "sha256", Hex: "cc"}}, // attestation without platform
	}}
	for _, tc := range []struct {
		want v1.Platform
		hex  string
	}{
		{v1.Platform{OS: "linux", Architecture: "amd64"}, "aa"},
		{v1.Platform{OS: "linux", Architecture: "arm64"}, "bb"},
		{v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, "bb"},
		{v1.Platform{OS: "linux", Architecture: "s390x"}, ""},
		{v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v7"}, ""},
	} {
		d, err := SelectPlatform(idx, tc.want)
		if tc.hex == "" {
			if vocab.ReasonOf(err) != vocab.ReasonPlatformUnavailable {
				t.Errorf("%s: got %v, want PlatformUnavailable", tc.want, err)
			}
			continue
		}
		if err != nil || d.Digest.Hex != tc.hex {
			t.Errorf("%s: got %v %v", tc.want, d.Digest, err)
		}
	}
}
