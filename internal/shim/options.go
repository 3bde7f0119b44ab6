package shim

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/typeurl/v2"
	"github.com/pelletier/go-toml/v2"
	"google.golang.org/protobuf/types/known/anypb"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// runcOptions returns the runc options for a task, whatever form containerd sent them in.
//
// The brewlet handler carries no options table (docs/shim.md, "Runtime options"): containerd
// then sends none, or, for a user-namespaced container, runc options holding only the I/O
// owner; the handler's runc options come from the file the agent copies them into
// (hoststate.HandlerOptionsFile), with containerd's I/O owner on top. A handler written with
// an options table (by hand, or by an agent before the table moved) still works: containerd's
// CRI sends it as runtimeoptions.Options with the TOML in ConfigBody, which the reused runc
// task service would panic on. legacy reports that form: such a handler cannot run
// user-namespaced containers (containerd refuses to add their I/O owner to the table).
func runcOptions(in *anypb.Any, file func() ([]byte, error)) (ro *options.Options, legacy bool, err error) {
	var v any
	if in.GetValue() != nil {
		if v, err = typeurl.UnmarshalAny(in); err != nil {
			return nil, false, fmt.Errorf("decode runtime options %q: %w", in.GetTypeUrl(), err)
		}
	}
	ro = &options.Options{}
	switch o := v.(type) {
	case *runtimeoptions.Options:
		legacy = true
		if len(o.ConfigBody) > 0 {
			if err := toml.Unmarshal(o.ConfigBody, ro); err != nil {
				return nil, true, fmt.Errorf("decode the handler's options table: %w", err)
			}
		}
	case nil, *options.Options:
		b, err := file()
		if err != nil {
			return nil, false, fmt.Errorf("read the brewlet handler's runc options: %w", err)
		}
		if len(b) > 0 {
			if err := toml.Unmarshal(b, ro); err != nil {
				return nil, false, fmt.Errorf("decode the brewlet handler's runc options: %w", err)
			}
		}
		if sent, ok := o.(*options.Options); ok && sent != nil {
			// Only what containerd's CRI adds for a user-namespaced container.
			ro.IoUid, ro.IoGid = sent.IoUid, sent.IoGid
		}
	default:
		return nil, false, fmt.Errorf("unsupported runtime options type %T; configure the brewlet handler with runc options (BinaryName, Root, SystemdCgroup)", v)
	}
	if err := runcBinary(ro.BinaryName); err != nil {
		return nil, legacy, err
	}
	return ro, legacy, nil
}

// runcBinary refuses a BinaryName that is not runc: the shim judged the OCI spec it hands
// over, and a wrapper runtime in between (one that injects hooks, devices or mounts) would
// run what it refused.
func runcBinary(name string) error {
	if name == "" || filepath.Base(name) == "runc" {
		return nil
	}
	return vocab.Errorf(vocab.ReasonContainerdConfigFailed, "the brewlet handler's BinaryName %q is not runc: a wrapper runtime could add to the container what the shim refused; set BinaryName to runc's path or remove it from the handler's options", name)
}

// normalizeOptions rewrites opts in place into runc options.
// The cgroup driver follows the container's cgroup path when the handler's options do not
// name it: containerd's CRI writes a systemd path ("slice:prefix:name") exactly when the
// kubelet's cgroup parent is a systemd slice, and runc needs --systemd-cgroup for it.
func normalizeOptions(opts **anypb.Any, l hoststate.Layout, cgroupsPath string) error {
	ro, legacy, err := runcOptions(*opts, l.ReadHandlerOptions)
	if err != nil {
		return err
	}
	if !legacy && !ro.SystemdCgroup && systemdPath(cgroupsPath) {
		ro.SystemdCgroup = true
	}
	a, err := typeurl.MarshalAnyToProto(ro)
	if err != nil {
		return err
	}
	*opts = a
	return nil
}

// systemdPath reports whether a cgroup path is in runc's systemd form, "slice:prefix:name".
func systemdPath(p string) bool {
	parts := strings.Split(p, ":")
	return len(parts) == 3 && strings.HasSuffix(parts[0], ".slice") && !strings.Contains(p, "/")
}
