package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// The image check asks containerd three things: which image a container record names,
// which target an image name points at, and the bytes of a blob. containerd's generated API
// packages would do it, but linking them initializes the protobuf descriptors of three whole
// services, and the first call of each builds reflection tables for every message it
// touches (a container record carries the OCI spec, runtime options, labels, extensions and
// timestamps): together about 200 KiB of heap that a shim keeps for its pod's life, for a
// handful of strings. So the few fields the check needs are read off the wire with
// protowire, through gRPC with a codec that passes bytes. The field numbers are containerd's
// API (containerd/api, services/{containers,images,content}/v1 and types/descriptor.proto);
// containerdapi_test.go checks them against the generated types.
const (
	methodContainerGet = "/containerd.services.containers.v1.Containers/Get"
	methodImageGet     = "/containerd.services.images.v1.Images/Get"
	methodContentRead  = "/containerd.services.content.v1.Content/Read"

	// GetContainerRequest.id, GetImageRequest.name, ReadContentRequest.digest
	fieldRequestKey protowire.Number = 1
	// GetContainerResponse.container, GetImageResponse.image
	fieldResponseRecord protowire.Number = 1
	fieldContainerImage protowire.Number = 3 // Container.image
	fieldImageTarget    protowire.Number = 3 // Image.target (a Descriptor)
	fieldDescMediaType  protowire.Number = 1 // Descriptor.media_type
	fieldDescDigest     protowire.Number = 2 // Descriptor.digest
	fieldReadOffset     protowire.Number = 1 // ReadContentResponse.offset
	fieldReadData       protowire.Number = 2 // ReadContentResponse.data
)

// rawCodec hands gRPC messages already encoded (*[]byte out) and returns replies as bytes
// (*[]byte in). Its name is "proto" so that containerd's server decodes the requests as the
// protobuf messages they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot encode %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot decode into %T", v)
	}
	*b = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// keyRequest encodes a request whose only field is its string key (field 1).
func keyRequest(key string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, fieldRequestKey, protowire.BytesType), key)
}

// wireField returns field num of the message b, with found false when it is absent. It
// accepts only the wire type the field is declared with, fails on malformed input and on a
// field that occurs twice (protobuf would merge or overwrite; containerd sends each once).
func wireField(b []byte, num protowire.Number, typ protowire.Type) (bytesVal []byte, varint uint64, found bool, err error) {
	for len(b) > 0 {
		n, t, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, 0, false, protowire.ParseError(l)
		}
		b = b[l:]
		if n != num {
			if l = protowire.ConsumeFieldValue(n, t, b); l < 0 {
				return nil, 0, false, protowire.ParseError(l)
			}
			b = b[l:]
			continue
		}
		if t != typ {
			return nil, 0, false, fmt.Errorf("field %d has wire type %d, not %d", num, t, typ)
		}
		if found {
			return nil, 0, false, fmt.Errorf("field %d occurs twice", num)
		}
		switch typ {
		case protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return nil, 0, false, protowire.ParseError(l)
			}
			bytesVal, found, b = v, true, b[l:]
		case protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return nil, 0, false, protowire.ParseError(l)
			}
			varint, found, b = v, true, b[l:]
		default:
			return nil, 0, false, fmt.Errorf("field %d: wire type %d is not read", num, typ)
		}
	}
	return bytesVal, varint, found, nil
}

// wireString follows path (each step an embedded message, the last a string field) through
// msg. An absent step or field is the empty string, as proto3 decodes it.
func wireString(msg []byte, path ...protowire.Number) (string, error) {
	for i, num := range path {
		v, _, found, err := wireField(msg, num, protowire.BytesType)
		if err != nil {
			return "", err
		}
		if !found {
			return "", nil
		}
		if i == len(path)-1 {
			if !utf8.Valid(v) {
				return "", fmt.Errorf("field %d is not valid UTF-8", num)
			}
			return string(v), nil
		}
		msg = v
	}
	return "", nil
}

// containerImage is the image name containerd's record of container id holds.
func containerImage(ctx context.Context, conn *grpc.ClientConn, id string) (string, error) {
	req, resp := keyRequest(id), []byte(nil)
	if err := conn.Invoke(ctx, methodContainerGet, &req, &resp, grpc.ForceCodecV2(rawCodec{})); err != nil {
		return "", err
	}
	return wireString(resp, fieldResponseRecord, fieldContainerImage)
}

// imageTarget is the media type and digest of the target of containerd's image name.
func imageTarget(ctx context.Context, conn *grpc.ClientConn, name string) (mediaType, digest string, err error) {
	req, resp := keyRequest(name), []byte(nil)
	if err := conn.Invoke(ctx, methodImageGet, &req, &resp, grpc.ForceCodecV2(rawCodec{})); err != nil {
		return "", "", err
	}
	if mediaType, err = wireString(resp, fieldResponseRecord, fieldImageTarget, fieldDescMediaType); err != nil {
		return "", "", err
	}
	digest, err = wireString(resp, fieldResponseRecord, fieldImageTarget, fieldDescDigest)
	return mediaType, digest, err
}

// readBlob reads a blob from containerd's content store, at most maxBlob bytes. Each reply
// must continue where the last ended.
func readBlob(ctx context.Context, conn *grpc.ClientConn, digest string) ([]byte, error) {
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Read", ServerStreams: true}, methodContentRead, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return nil, err
	}
	req := keyRequest(digest)
	if err := stream.SendMsg(&req); err != nil {
		return nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	var out []byte
	for {
		var msg []byte
		err := stream.RecvMsg(&msg)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s from containerd's content store: %w", digest, err)
		}
		_, off, _, err := wireField(msg, fieldReadOffset, protowire.VarintType)
		if err != nil {
			return nil, fmt.Errorf("read %s from containerd's content store: %w", digest, err)
		}
		data, _, _, err := wireField(msg, fieldReadData, protowire.BytesType)
		if err != nil {
			return nil, fmt.Errorf("read %s from containerd's content store: %w", digest, err)
		}
		if off != uint64(len(out)) {
			return nil, fmt.Errorf("read %s from containerd's content store: a reply at offset %d after %d bytes", digest, off, len(out))
		}
		out = append(out, data...)
		if len(out) > maxBlob {
			return nil, fmt.Errorf("blob %s is over %d bytes", digest, maxBlob)
		}
	}
}
