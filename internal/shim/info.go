package shim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/typeurl/v2"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// maxInfoOptions bounds the options containerd writes to `-info`'s standard input.
const maxInfoOptions = 1 << 20

// AnnotationUserNamespaces is the feature annotation that says why the handler offers no
// user namespaces on this node (absent where it offers them).
const AnnotationUserNamespaces = vocab.Domain + "/user-namespaces"

// Info answers containerd's introspection (`-info`, read by its CRI once at start): runc's
// features, seen through the handler's own runc options, with user namespaces offered only
// where the shim can map its layers into them. containerd's CRI offers user namespaces on a
// handler whose runtime reports both the user namespace and idmapped mounts; the kubelet
// then refuses hostUsers: false pods on a handler that does not, with its own message,
// instead of a start failing on the node.
func (m *shimManager) Info(ctx context.Context, optionsR io.Reader) (*types.RuntimeInfo, error) {
	b, err := io.ReadAll(io.LimitReader(optionsR, maxInfoOptions+1))
	if err != nil || len(b) > maxInfoOptions {
		return nil, fmt.Errorf("read runtime options: %d bytes, %v", len(b), err)
	}
	var in *anypb.Any
	if len(b) > 0 {
		in = &anypb.Any{}
		if err := proto.Unmarshal(b, in); err != nil {
			return nil, fmt.Errorf("decode runtime options: %w", err)
		}
	}
	l := layout()
	ro, legacy, err := runcOptions(in, l.ReadHandlerOptions)
	if err != nil {
		return nil, err
	}
	a, err := typeurl.MarshalAnyToProto(ro)
	if err != nil {
		return nil, err
	}
	if b, err = proto.Marshal(a); err != nil {
		return nil, err
	}
	info, err := m.Shim.Info(ctx, bytes.NewReader(b))
	if err != nil || info.Features == nil {
		return info, err
	}
	if why := usernsUnavailable(legacy, l); why != "" {
		if err := withoutUserNamespaces(info, why); err != nil {
			return nil, err
		}
	}
	return info, nil
}

// usernsUnavailable says why this node cannot run user-namespaced Brewlet containers
// ("" when it can).
func usernsUnavailable(legacy bool, l hoststate.Layout) string {
	if legacy {
		return "the brewlet handler in containerd's configuration has an options table, and containerd cannot give such a handler a user-namespaced container's I/O owner; let the agent register the handler (it keeps runc's options in " + l.HandlerOptionsFile() + ") or remove the table"
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil && !kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 19) {
		return "kernel " + unix.ByteSliceToString(u.Release[:]) + " cannot mount an overlay over idmapped layers (5.19 or later can)"
	}
	// The layers' directory, or where it will be: the agent may not have installed anything
	// yet when containerd asks.
	dir := filepath.Join(l.State, "layers")
	for {
		if _, err := os.Stat(dir); err == nil || filepath.Dir(dir) == dir {
			break
		}
		dir = filepath.Dir(dir)
	}
	userns, err := mount.GetUsernsFD("0:65536:65536", "0:65536:65536")
	if err != nil {
		return "cannot create a user namespace: " + err.Error()
	}
	defer func() { _ = userns.Close() }()
	fd, err := idmapped(dir, int(userns.Fd()))
	if err != nil {
		return "the runtime layers' filesystem (" + dir + ") cannot be idmapped: " + err.Error()
	}
	_ = unix.Close(fd) // detached: closing it unmounts it
	return ""
}

// kernelAtLeast compares a kernel release ("6.1.0-18-amd64") with major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if n, _ := fmt.Sscanf(release, "%d.%d", &ma, &mi); n != 2 {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

// withoutUserNamespaces turns idmapped mounts off in the runtime's features and says why.
func withoutUserNamespaces(info *types.RuntimeInfo, why string) error {
	v, err := typeurl.UnmarshalAny(info.Features)
	if err != nil {
		return err
	}
	f, ok := v.(*features.Features)
	if !ok {
		return fmt.Errorf("runtime features are %T", v)
	}
	if f.Linux == nil {
		f.Linux = &features.Linux{}
	}
	if f.Linux.MountExtensions == nil {
		f.Linux.MountExtensions = &features.MountExtensions{}
	}
	off := false
	f.Linux.MountExtensions.IDMap = &features.IDMap{Enabled: &off}
	if f.Annotations == nil {
		f.Annotations = map[string]string{}
	}
	f.Annotations[AnnotationUserNamespaces] = why
	info.Features, err = typeurl.MarshalAnyToProto(f)
	return err
}
