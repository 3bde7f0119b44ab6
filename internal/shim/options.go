package shim

import (
	"fmt"
	"path/filepath"

	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/typeurl/v2"
	"github.com/pelletier/go-toml/v2"
	"google.golang.org/protobuf/types/known/anypb"

	"brewlet.sh/brewlet/internal/vocab"
)

// runcOptions returns the runc options for a task, whatever form containerd sent them in.
//
// containerd's CRI hands a runtime_type other than io.containerd.runc.v2 its [options]
// table as runtimeoptions.Options with the TOML in ConfigBody, while the reused runc task
// service type-asserts runc options and would panic on anything else; ctr sends none.
func runcOptions(in *anypb.Any) (*options.Options, error) {
	ro := &options.Options{}
	if in.GetValue() == nil {
		return ro, nil
	}
	v, err := typeurl.UnmarshalAny(in)
	if err != nil {
		return nil, fmt.Errorf("decode runtime options %q: %w", in.GetTypeUrl(), err)
	}
	switch o := v.(type) {
	case *options.Options:
		ro = o
	case *runtimeoptions.Options:
		if len(o.ConfigBody) > 0 {
			if err := toml.Unmarshal(o.ConfigBody, ro); err != nil {
				return nil, fmt.Errorf("decode the handler's options table: %w", err)
			}
		}
	default:
		return nil, fmt.Errorf("unsupported runtime options type %T; configure the brewlet handler with runc options (BinaryName, Root, SystemdCgroup)", v)
	}
	if err := runcBinary(ro.BinaryName); err != nil {
		return nil, err
	}
	return ro, nil
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
func normalizeOptions(opts **anypb.Any) error {
	ro, err := runcOptions(*opts)
	if err != nil {
		return err
	}
	a, err := typeurl.MarshalAnyToProto(ro)
	if err != nil {
		return err
	}
	*opts = a
	return nil
}
