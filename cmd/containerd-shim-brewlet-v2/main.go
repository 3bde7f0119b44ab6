// Command containerd-shim-brewlet-v2 is the containerd shim of the "brewlet" runtime
// handler (runtime_type io.containerd.brewlet.v2).
package main

import (
	"context"

	"github.com/containerd/containerd/v2/pkg/shim"

	brewletshim "brewlet.sh/brewlet/internal/shim"
	"brewlet.sh/brewlet/internal/vocab"
)

func main() {
	brewletshim.Register()
	shim.RunShim(context.Background(), brewletshim.NewManager(vocab.ShimRuntimeType))
}
