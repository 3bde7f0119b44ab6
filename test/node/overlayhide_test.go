package node

import (
	"archive/tar"
	"bytes"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/artifact/ociimage"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/framework/testimage"
	"brewlet.sh/brewlet/test/kit"
)

// paxEntry is one tar entry with optional PAX extended attributes, which containerd's
// unpacker applies to the snapshot as they are.
type paxEntry struct {
	name, link string
	typ        byte
	mode       int64
	xattrs     map[string]string
}

func paxLayer(t *testing.T, es ...paxEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Format: tar.FormatPAX}
		for k, v := range e.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pushRawApp pushes an artifact of raw app layers (no validation on the way, as a hostile
// producer would) and a launch layer running sh.
func pushRawApp(t *testing.T, ref string, layers ...[]byte) string {
	t.Helper()
	l := &artifact.Launch{SchemaVersion: 2, Process: artifact.Process{Entrypoint: []string{"sh"}, WorkingDir: "/app"}}
	launchTar, err := artifact.LaunchLayerTar(l)
	if err != nil {
		t.Fatal(err)
	}
	img, err := testimage.Image(artifact.ImageConfig(l))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range append(layers, launchTar) {
		role := "app"
		if i == len(layers) {
			role = "launch"
		}
		layer, err := ociimage.OCILayer(b)
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
			Annotations: map[string]string{vocab.AnnotationLayer: role}}); err != nil {
			t.Fatal(err)
		}
	}
	img = mutate.Annotations(img, map[string]string{vocab.AnnotationArtifactVersion: vocab.ArtifactVersion}).(v1.Image)
	out, err := testimage.Push(img, ref, framework.RegistryClient(t)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// An escaping symlink in a lower application layer, under a directory that an upper layer
// marks opaque in a way the kernel ignores: containerd applies the archive's
// user.overlay.opaque=y (it drops only trusted.* attributes), and Brewlet's overlay mounts
// read trusted.overlay.* alone, so the container would see the link. The shim refuses it.
// Marked with a .wh..wh..opq entry instead, the directory is opaque for the kernel, the link
// is hidden and the container starts: the shim hides exactly what the kernel hides.
func TestDataPathOpaqueMarkerAgreesWithKernel(t *testing.T) {
	d := newDataPath(t)
	dirEntry := func(name string, xattrs map[string]string) paxEntry {
		return paxEntry{name: name, typ: tar.TypeDir, mode: 0o755, xattrs: xattrs}
	}
	lower := paxLayer(t, dirEntry("app/", nil), dirEntry("app/d/", nil),
		paxEntry{name: "app/d/shadow", typ: tar.TypeSymlink, link: "/etc/shadow", mode: 0o777})
	for i, tc := range []struct {
		name   string
		upper  []paxEntry
		reason vocab.Reason // "" = starts
	}{
		{"user.overlay.opaque", []paxEntry{dirEntry("app/", nil), dirEntry("app/d/", map[string]string{"user.overlay.opaque": "y"})},
			vocab.ReasonLayerPathViolation},
		{".wh..wh..opq", []paxEntry{dirEntry("app/", nil), dirEntry("app/d/", nil), {name: "app/d/.wh..wh..opq", typ: tar.TypeReg, mode: 0o644}}, ""},
	} {
		ref := pushRawApp(t, fmt.Sprintf("%s/apps/opaque:%d", d.N.Registry, i), lower, paxLayer(t, tc.upper...))
		_, _, err := d.Start(t, nil, func(c *runtimeapi.ContainerConfig) {
			c.Image.Image = ref
			c.Command = []string{"python", "-c", "import time; time.sleep(3600)"}
		})
		if tc.reason != "" {
			kit.ExpectReason(t, err, tc.reason)
			if !strings.Contains(err.Error(), "user.overlay.opaque") || !strings.Contains(err.Error(), "1 more") {
				t.Errorf("%s: the refusal should name the attribute and count the escaping link: %v", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
}
