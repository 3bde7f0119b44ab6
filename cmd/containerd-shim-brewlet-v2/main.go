// Command containerd-shim-brewlet-v2 is the containerd shim of the "brewlet" runtime
// handler (runtime_type io.containerd.brewlet.v2).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/pkg/shim"

	brewletshim "brewlet.sh/brewlet/internal/shim"
	"brewlet.sh/brewlet/internal/vocab"
)

func main() {
	brewletshim.Register()
	m := brewletshim.NewManager(vocab.ShimRuntimeType)
	// containerd 2.0–2.2 start shims with the protocol before 2.3's bootstrap API.
	handled, err := brewletshim.LegacyStart(context.Background(), m, os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[0], err)
		os.Exit(1)
	}
	if handled {
		return
	}
	shim.RunShim(context.Background(), m)
}
