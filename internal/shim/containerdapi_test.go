package shim

import (
	"bytes"
	"testing"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	contentapi "github.com/containerd/containerd/api/services/content/v1"
	imagesapi "github.com/containerd/containerd/api/services/images/v1"
	"github.com/containerd/containerd/api/types"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The shim reads containerd's replies with protowire (containerdapi.go); containerd's own
// generated types are the reference for the field numbers, here and only here.
func TestWireMatchesContainerdAPI(t *testing.T) {
	t.Run("requests", func(t *testing.T) {
		const key = "k8s.io/some id"
		var c containersapi.GetContainerRequest
		var i imagesapi.GetImageRequest
		var r contentapi.ReadContentRequest
		for _, m := range []proto.Message{&c, &i, &r} {
			if err := proto.Unmarshal(keyRequest(key), m); err != nil {
				t.Fatal(err)
			}
		}
		if c.ID != key || i.Name != key || r.Digest != key || r.Offset != 0 || r.Size != 0 {
			t.Errorf("requests decode as %q, %q, %q (offset %d, size %d)", c.ID, i.Name, r.Digest, r.Offset, r.Size)
		}
	})
	t.Run("container record", func(t *testing.T) {
		b := marshal(t, &containersapi.GetContainerResponse{Container: &containersapi.Container{
			ID: "c1", Labels: map[string]string{"image": "decoy"}, Image: "reg.example/app@sha256:0123",
			Runtime:     &containersapi.Container_Runtime{Name: "io.containerd.brewlet.v2", Options: &anypb.Any{TypeUrl: "x", Value: []byte("y")}},
			Spec:        &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Spec", Value: bytes.Repeat([]byte("{}"), 5000)},
			Snapshotter: "overlayfs", SnapshotKey: "c1", CreatedAt: timestamppb.Now(),
			Extensions: map[string]*anypb.Any{"e": {TypeUrl: "e", Value: []byte{3}}}, Sandbox: "s1",
		}})
		if got := readString(t, b, fieldResponseRecord, fieldContainerImage); got != "reg.example/app@sha256:0123" {
			t.Errorf("image %q", got)
		}
	})
	t.Run("image target", func(t *testing.T) {
		b := marshal(t, &imagesapi.GetImageResponse{Image: &imagesapi.Image{
			Name: "reg.example/app:1", Labels: map[string]string{"a": "b"}, CreatedAt: timestamppb.Now(),
			Target: &types.Descriptor{MediaType: "application/vnd.oci.image.index.v1+json", Digest: "sha256:abcd", Size: 1234,
				Annotations: map[string]string{"org.opencontainers.image.ref.name": "1"}},
		}})
		if got := readString(t, b, fieldResponseRecord, fieldImageTarget, fieldDescMediaType); got != "application/vnd.oci.image.index.v1+json" {
			t.Errorf("media type %q", got)
		}
		if got := readString(t, b, fieldResponseRecord, fieldImageTarget, fieldDescDigest); got != "sha256:abcd" {
			t.Errorf("digest %q", got)
		}
	})
	t.Run("content reply", func(t *testing.T) {
		b := marshal(t, &contentapi.ReadContentResponse{Offset: 4096, Data: []byte("blob bytes")})
		_, off, _, err := wireField(b, fieldReadOffset, protowire.VarintType)
		data, _, _, err2 := wireField(b, fieldReadData, protowire.BytesType)
		if err != nil || err2 != nil || off != 4096 || string(data) != "blob bytes" {
			t.Errorf("offset %d data %q (%v, %v)", off, data, err, err2)
		}
	})
	t.Run("absent fields read as empty", func(t *testing.T) {
		b := marshal(t, &imagesapi.GetImageResponse{Image: &imagesapi.Image{Name: "x"}})
		if got, err := wireString(b, fieldResponseRecord, fieldImageTarget, fieldDescDigest); got != "" || err != nil {
			t.Errorf("%q %v", got, err)
		}
	})
}

// Replies that are not what containerd sends: each an error, none a value.
func TestWireRefusesMalformedReplies(t *testing.T) {
	tag := func(n protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, n, typ) }
	record := func(inner []byte) []byte {
		return protowire.AppendBytes(tag(fieldResponseRecord, protowire.BytesType), inner)
	}
	image := func(s string) []byte { return protowire.AppendString(tag(fieldContainerImage, protowire.BytesType), s) }
	for name, b := range map[string][]byte{
		"truncated tag":              {0x80},
		"length past the end":        append(tag(fieldResponseRecord, protowire.BytesType), 0x7f, 'a'),
		"record as a varint":         protowire.AppendVarint(tag(fieldResponseRecord, protowire.VarintType), 7),
		"image as a varint":          record(protowire.AppendVarint(tag(fieldContainerImage, protowire.VarintType), 7)),
		"record twice":               append(record(image("a")), record(image("b"))...),
		"image twice":                record(append(image("a"), image("b")...)),
		"image not UTF-8":            record(image("\xff\xfe")),
		"truncated skipped field":    record(append(tag(9, protowire.Fixed64Type), 1, 2)),
		"group wire type in the way": record(append(tag(9, protowire.StartGroupType), image("a")...)),
	} {
		if got, err := wireString(b, fieldResponseRecord, fieldContainerImage); err == nil {
			t.Errorf("%s: read %q, want an error", name, got)
		}
	}
}

// Whatever bytes a reply holds, the reader returns an error or the value containerd's own
// decoder finds.
func FuzzWireString(f *testing.F) {
	f.Add([]byte{})
	f.Add(marshal(f, &containersapi.GetContainerResponse{Container: &containersapi.Container{ID: "c", Image: "i", Labels: map[string]string{"k": "v"}}}))
	f.Add(marshal(f, &imagesapi.GetImageResponse{Image: &imagesapi.Image{Name: "n", Target: &types.Descriptor{MediaType: "m", Digest: "d"}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := wireString(b, fieldResponseRecord, fieldContainerImage)
		var ref containersapi.GetContainerResponse
		if err != nil || proto.Unmarshal(b, &ref) != nil {
			return
		}
		if want := ref.GetContainer().GetImage(); got != want {
			t.Errorf("read %q, containerd's decoder %q", got, want)
		}
		mt, err1 := wireString(b, fieldResponseRecord, fieldImageTarget, fieldDescMediaType)
		dg, err2 := wireString(b, fieldResponseRecord, fieldImageTarget, fieldDescDigest)
		var img imagesapi.GetImageResponse
		if err1 != nil || err2 != nil || proto.Unmarshal(b, &img) != nil {
			return
		}
		if mt != img.GetImage().GetTarget().GetMediaType() || dg != img.GetImage().GetTarget().GetDigest() {
			t.Errorf("read %q %q, containerd's decoder %q %q", mt, dg, img.GetImage().GetTarget().GetMediaType(), img.GetImage().GetTarget().GetDigest())
		}
	})
}

func marshal(tb testing.TB, m proto.Message) []byte {
	tb.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func readString(tb testing.TB, b []byte, path ...protowire.Number) string {
	tb.Helper()
	s, err := wireString(b, path...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
