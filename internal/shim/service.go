// Package shim is the containerd runtime v2 shim behind the "brewlet" handler. It is
// containerd's own runc shim with its TTRPC task service wrapped: lifecycle, IO, exits, OOM
// events and cgroups stay stock. Brewlet intervenes where a container is created or a
// process is added to it, and saves runc's execs where a stop needs none (kill.go, stop.go).
package shim

import (
	"sync"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/task"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
	"github.com/containerd/ttrpc"
)

// service wraps the runc task service; calls it does not override pass straight through.
type service struct {
	taskAPI.TTRPCTaskService
	// killed: container ID -> when the first Kill of its init process came (time.Time).
	// An exit after it was asked for, never a failed start (recordFailedStart).
	killed sync.Map
}

// RegisterTTRPC serves the wrapper, not the inner service, on the shim's socket.
func (s *service) RegisterTTRPC(server *ttrpc.Server) error {
	taskAPI.RegisterTTRPCTaskService(server, s)
	return nil
}

// Register adds the wrapped task service as the shim's "task" TTRPC plugin. It replaces
// containerd's own registration in cmd/containerd-shim-runc-v2/task/plugin, which must
// therefore not be linked in.
func Register() {
	registry.Register(&plugin.Registration{
		Type:     plugins.TTRPCPlugin,
		ID:       "task",
		Requires: []plugin.Type{plugins.EventPlugin, plugins.InternalPlugin},
		InitFn: func(ic *plugin.InitContext) (any, error) {
			pp, err := ic.GetByID(plugins.EventPlugin, "publisher")
			if err != nil {
				return nil, err
			}
			ss, err := ic.GetByID(plugins.InternalPlugin, "shutdown")
			if err != nil {
				return nil, err
			}
			ts, err := task.NewTaskService(ic.Context, pp.(shim.Publisher), ss.(shutdown.Service))
			if err != nil {
				return nil, err
			}
			enableAllocProfiling()
			return &service{TTRPCTaskService: ts}, nil
		},
	})
}
